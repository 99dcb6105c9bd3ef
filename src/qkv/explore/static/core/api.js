// Talking to the server: POST JSON, read JSON, turn failures into sentences.
//
// data-pending on <html> counts requests queued or in flight (and the page's own start-up),
// so tests can wait for "0".
import { clearError, refusalMark, showError } from "./errors.js";

let pending = 0;
/** Count a request (or any wait the tests should see) in (+1) or out (−1). */
export function setPending(delta) {
  pending += delta;
  document.documentElement.dataset.pending = String(pending);
}

/** A failed request: status is the HTTP status (0 if the server could not be reached or the
 * page itself refused the input), message a sentence for a person, problems the server's
 * [{field, message}] (a 422's "errors"), which core/errors.js words with the controls' labels. */
export class ApiError extends Error {
  constructor(status, message, problems = []) {
    super(message);
    this.status = status;
    this.problems = problems;
  }
}

// A classroom's server (qkv explore --classroom) queues the heavy requests, fairly between
// learners. While one of this page's requests waits, GET /api/queue says how many requests
// are ahead of it, and #queue-note shows it ("3 ahead of you"). A server without a queue
// answers {classroom: false} there (an older one 404), and the page stops asking.
const QUEUE_AFTER_MS = 400;
const QUEUE_EVERY_MS = 1000;
let queueServer = true;
const inFlight = new Map(); // path → requests of this page in flight
let queueTimer = null;

function queueNote() {
  let note = document.getElementById("queue-note");
  if (!note) {
    note = document.createElement("div");
    Object.assign(note, { id: "queue-note", role: "status" });
    note.dataset.testid = "queue-note";
    note.hidden = true;
    document.body.append(note);
  }
  return note;
}

async function pollQueue() {
  queueTimer = null;
  if (!queueServer || inFlight.size === 0) { queueNote().hidden = true; return; }
  try {
    const response = await fetch("/api/queue");
    if (response.status === 404) { queueServer = false; queueNote().hidden = true; return; }
    const data = await response.json();
    if (data.classroom === false) { queueServer = false; queueNote().hidden = true; return; }
    const mine = (data.waiting || []).filter((w) => inFlight.has(w.path));
    const note = queueNote();
    if (mine.length && inFlight.size) {
      const ahead = Math.min(...mine.map((w) => w.ahead));
      note.textContent = `Waiting for the shared machine: ${ahead} ahead of you`;
      note.dataset.ahead = String(ahead);
      note.hidden = false;
    } else {
      note.hidden = true;
    }
  } catch { /* the request itself reports an unreachable server */ }
  if (inFlight.size) queueTimer = setTimeout(pollQueue, QUEUE_EVERY_MS);
}

/** Count path's request in (+1) or out (−1); ask the queue after QUEUE_AFTER_MS in flight. */
function track(path, delta) {
  const n = (inFlight.get(path) || 0) + delta;
  if (n > 0) inFlight.set(path, n); else inFlight.delete(path);
  if (inFlight.size === 0) {
    if (queueTimer) clearTimeout(queueTimer);
    queueTimer = null;
    const note = document.getElementById("queue-note");
    if (note) note.hidden = true;
  } else if (!queueTimer && queueServer) {
    queueTimer = setTimeout(pollQueue, QUEUE_AFTER_MS);
  }
}

/** The page's transport: POST body as JSON to path (GET when body is undefined); the
 * answer's JSON, or an ApiError with the server's detail. */
async function fetchJSON(path, body) {
  let response;
  if (body !== undefined) track(path, +1);
  try {
    response = await fetch(path, body === undefined ? {} : {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, "cannot reach the qkv explore server: is `qkv explore` still running?");
  } finally {
    if (body !== undefined) track(path, -1);
  }
  let data = null;
  try { data = await response.json(); } catch { /* not JSON: described below */ }
  if (!response.ok) {
    const detail = data && typeof data.detail === "string" ? data.detail
      : `the server answered ${response.status}`;
    const problems = data && Array.isArray(data.errors) ? data.errors : [];
    // the status and the field paths stay in the console (and the API); the page words them
    console.info(`${path}: HTTP ${response.status}: ${detail}`);
    throw new ApiError(response.status, detail, problems);
  }
  return data;
}

// How a request reaches the server and its answer comes back: transport(path, body) resolves
// to the answer's JSON or rejects with an ApiError (body undefined: a GET). The page's is
// fetch to `qkv explore`; the notebook widgets (qkv/widgets/widget.js) pass theirs, widget
// messages answered by the kernel, to setTransport. Nothing else in the views changes.
let transport = fetchJSON;

/** Send every request of this page (or widget) through fn(path, body) instead of fetch. */
export function setTransport(fn) {
  transport = fn;
}

/** POST body to path: the answer's JSON, or an ApiError with the server's detail. */
export function post(path, body) {
  return transport(path, body);
}

/** GET path: the answer's JSON, or an ApiError. */
export function get(path) {
  return transport(path, undefined);
}

// Tests set window.qkvRecordReads = true before the page starts: every answer is then wrapped
// so that each field the page reads is recorded in window.qkvReads as "path field.sub" (array
// indices left out), and tests/test_explore_schemas.py checks each against the view's READS.
const wrapped = new WeakMap();
function recording(value, path, field) {
  if (value === null || typeof value !== "object") return value;
  const key = `${path} ${field}`;
  let byField = wrapped.get(value);
  if (!byField) wrapped.set(value, byField = new Map());
  if (!byField.has(key)) {
    byField.set(key, new Proxy(value, {
      get(target, prop, receiver) {
        const got = Reflect.get(target, prop, receiver);
        if (typeof prop !== "string") return got;
        if (Array.isArray(target)) return /^\d+$/.test(prop) ? recording(got, path, field) : got;
        const sub = field ? `${field}.${prop}` : prop;
        window.qkvReads.add(`${path} ${sub}`);
        return recording(got, path, sub);
      },
    }));
  }
  return byField.get(key);
}

/** One endpoint for one view, at most one request in flight; a newer request replaces a
 * queued one. onResult(data, body) draws an answer; a failure goes to the view's error (and
 * marks what the view shows as stale), then to onError(err, body) if given. */
export class Channel {
  constructor(view, path, onResult, onError = null) {
    Object.assign(this, { view, path, onResult, onError, busy: false, queued: undefined });
  }
  send(body) {
    if (this.queued === undefined) setPending(+1);
    this.queued = body;
    if (!this.busy) this.pump();
  }
  async pump() {
    this.busy = true;
    while (this.queued !== undefined) {
      const body = this.queued;
      this.queued = undefined;
      const mark = refusalMark(this.view);
      try {
        let data = await post(this.path, body);
        // the learner typed something the page refused while this was in flight: the answer
        // is for inputs no longer on screen, and must not clear the refusal's words
        if (refusalMark(this.view) !== mark) continue;
        if (window.qkvRecordReads) {
          window.qkvReads = window.qkvReads || new Set();
          data = recording(data, this.path, "");
        }
        clearError(this.view);
        this.onResult(data, body);
      } catch (err) {
        // 409: a classroom's queue answered this with a newer request of the learner's (from
        // another tab) that took its place: nothing went wrong, and the newer one will draw
        if (err.status === 409) continue;
        showError(this.view, err);
        if (this.onError) this.onError(err, body);
      } finally {
        setPending(-1);
      }
    }
    this.busy = false;
  }
}

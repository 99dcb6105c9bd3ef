// Talking to the server: POST JSON, read JSON, turn failures into sentences.
//
// data-pending on <html> counts requests queued or in flight (and the page's own start-up),
// so tests can wait for "0".
import { clearError, showError } from "./errors.js";

let pending = 0;
/** Count a request (or any wait the tests should see) in (+1) or out (−1). */
export function setPending(delta) {
  pending += delta;
  document.documentElement.dataset.pending = String(pending);
}

/** A failed request: status is the HTTP status (0 if the server could not be reached or the
 * page itself refused the input), message a sentence for a person. */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** POST body as JSON to path; the answer's JSON, or an ApiError with the server's detail. */
export async function post(path, body) {
  let response;
  try {
    response = await fetch(path, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  } catch {
    throw new ApiError(0, "cannot reach the qkv explore server: is `qkv explore` still running?");
  }
  let data = null;
  try { data = await response.json(); } catch { /* not JSON: described below */ }
  if (!response.ok) {
    const detail = data && typeof data.detail === "string" ? data.detail
      : `the server answered ${response.status}`;
    throw new ApiError(response.status, detail);
  }
  return data;
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
 * queued one. onResult(data, body) draws an answer; a failure goes to the view's error. */
export class Channel {
  constructor(view, path, onResult) {
    Object.assign(this, { view, path, onResult, busy: false, queued: undefined });
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
      try {
        let data = await post(this.path, body);
        if (window.qkvRecordReads) {
          window.qkvReads = window.qkvReads || new Set();
          data = recording(data, this.path, "");
        }
        clearError(this.view);
        this.onResult(data, body);
      } catch (err) {
        showError(this.view, err);
      } finally {
        setPending(-1);
      }
    }
    this.busy = false;
  }
}

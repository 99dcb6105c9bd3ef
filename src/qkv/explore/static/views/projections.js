// View 1 · X → Q, K, V: n tokens of d_model = 2 numbers drawn as a shape, mapped three ways by
// W_Q, W_K, W_V (dragged basis arrows or typed numbers); each W written as rotation · stretch ·
// rotation with a morph through the three steps; one query point's lookup (its dot products,
// weights and blended output); d_k = 2 or 1. Everything shown comes from the server (POST
// /api/projections: Q, K, V, qkv.explain's trace, numpy's SVD, the counts of where each largest
// weight falls); the local product only keeps a drag smooth while the answer is on its way.
import { ApiError, Channel } from "../core/api.js";
import { announce, el, fmt, scrollBox, svg, svgPoint } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { fanOut } from "../core/fan.js";
import { placeLabels, spotsAround } from "../core/labels.js";
import { heat, legend, paint } from "../core/legend.js";
import { defineState, state, writeURL } from "../core/state.js";
import { matrixTable } from "../core/table.js";
import { mount as mountFrozen, show as showFrozen } from "../lesson/frozen_ws.js";

export const name = "projections";
// (/api/projections/frozen: read by lesson/frozen_ws.js, the toy trained with the W's learned,
// one frozen, or one alone)
export const READS = {
  "/api/projections": ["q", "k", "v", "n", "d_k", "d_v", "frames_per_step",
    "trace.weights", "trace.output", "trace.scale", "shapes.X", "shapes.Q", "shapes.K",
    "shapes.V", "shapes.weights", "shapes.output",
    "factors.w_q.shape", "factors.w_q.u", "factors.w_q.stretch", "factors.w_q.vt", "factors.w_q.factors",
    "factors.w_q.angles", "factors.w_q.reflection", "factors.w_q.rank", "factors.w_q.steps", "factors.w_q.frames",
    "factors.w_k.shape", "factors.w_k.u", "factors.w_k.stretch", "factors.w_k.vt", "factors.w_k.factors",
    "factors.w_k.angles", "factors.w_k.reflection", "factors.w_k.rank", "factors.w_k.steps", "factors.w_k.frames",
    "factors.w_v.shape", "factors.w_v.u", "factors.w_v.stretch", "factors.w_v.vt", "factors.w_v.factors",
    "factors.w_v.angles", "factors.w_v.reflection", "factors.w_v.rank", "factors.w_v.steps", "factors.w_v.frames",
    "selected.i", "selected.q", "selected.dots", "selected.scale", "selected.scaled",
    "selected.weights", "selected.output", "selected.top",
    "lookups.top", "lookups.self_count", "lookups.next_count", "lookups.previous_count",
    "lookups.tied", "lookups.keys_used", "lookups.can_self"],
  "/api/projections/frozen": ["command", "points", "steps", "runs.label", "runs.learned",
    "runs.frozen_at", "runs.mse_start", "runs.mse", "runs.tokens", "runs.right",
    "runs.top_on_neighbour", "runs.top_on_self", "runs.weight_on_neighbour", "runs.w_q",
    "runs.w_k", "runs.w_v"],
};

// the controls by the request fields they fill, so a server's complaint names the control
export const LABELS = { w_q: "W_Q", w_k: "W_K", w_v: "W_V", x: "the shape", query: "query point" };

let root;
const $ = (sel) => root.querySelector(sel);

const SHAPES = {
  circle: Array.from({ length: 8 }, (_, i) => [
    Number(Math.cos((2 * Math.PI * i) / 8).toFixed(4)),
    Number(Math.sin((2 * Math.PI * i) / 8).toFixed(4))]),
  letter: [[-0.5, -1], [-0.5, -0.3], [-0.5, 0.4], [-0.5, 1], [0.2, 1], [0.9, 1], [0.2, 0.4]],
};
const SHAPE_PATHS = { circle: [0, 1, 2, 3, 4, 5, 6, 7, 0], letter: [0, 1, 2, 3, 4, 5, null, 2, 6] };
const deg = Math.PI / 180;
const PRESETS = {
  identity: [[1, 0], [0, 1]],
  rotation: [[Math.cos(45 * deg), Math.sin(45 * deg)], [-Math.sin(45 * deg), Math.cos(45 * deg)]]
    .map((r) => r.map((x) => Number(x.toFixed(4)))),
  stretch: [[2, 0], [0, 0.5]],
  shear: [[1, 0], [1, 1]],
  projection: [[0.5, 0.5], [0.5, 0.5]],
};
// 2 × 1 presets (d_k = 1): each row of W is one number, the image of e0 or e1 on a line
const PRESETS_1 = { "x only": [[1], [0]], "y only": [[0], [1]], "x + y": [[0.5], [0.5]],
  "x − y": [[1], [-1]] };
const PLANE = { size: 220, range: 2.5 };
const PT_FONT = 13; // .pt-label in style.css: ≥ 11 CSS px when two planes share a phone's row
const KNOB_FONT = 13; // .knob-name
const EDGE_FONT = 12; // .edge-note: the planes' smallest text
const MIN_TEXT_PX = 11.5; // no text of a plane renders smaller, in CSS px
// How much larger than at full size the planes' text is drawn: a phone shows two 220-unit
// planes a row, ~180 px wide, which would render 13-unit labels at 10.75 px.
let zoom = 1;

/** The zoom that keeps the planes' smallest text ≥ MIN_TEXT_PX as rendered. */
function textZoom() {
  const plane = $("#proj-planes-box svg.proj-plane");
  const shown = plane ? plane.getBoundingClientRect().width : 0;
  return shown > 0 ? Math.max(1, (MIN_TEXT_PX * PLANE.size) / (EDGE_FONT * shown)) : 1;
}
/** Draw an SVG text at `size` units times the zoom (through the CSSOM: the page's CSP refuses
 * style attributes). */
const zoomText = (node, size) => { node.style.fontSize = `${(size * zoom).toFixed(2)}px`; };
const MATS = [["w_q", "W_Q", "Q", "query"], ["w_k", "W_K", "K", "key"], ["w_v", "W_V", "V", "value"]];
const STEP_NAMES = ["turn", "stretch", "turn"];
// the view's own state beyond state.proj: the selected query, d_k, the 2 × 1 W_Q and W_K
const LOOKUP_DEFAULTS = { query: 0, dk: 2, narrow: { w_q: [[1], [0]], w_k: [[1], [0]] } };
defineState("lookup", LOOKUP_DEFAULTS); // tidyLookup() keeps a hand-edited URL's in this shape

let learned = null; // the "learned" preset, served by /api/projections/learned
let answer = null; // the last answer, with the request it answers
let t = 3; // the morph: 0 = X, 1 = turned, 2 = stretched, 3 = X W
let playing = null; // the play timer
const channel = new Channel(name, "/api/projections", (data, body) => {
  answer = { data, request: body };
  renderResult(data);
  renderPlanes();
});

/** Fetch the "learned" preset once, before the page starts. */
export async function prepare() {
  try {
    const reply = await fetch("/api/projections/learned");
    if (reply.ok) learned = await reply.json();
  } catch { /* the server is gone: every view will say so */ }
}

const points = () => SHAPES[state.proj.shape];
const n = () => points().length;
/** The matrix W_Q, W_K or W_V in use (2 × 1 for W_Q, W_K when d_k = 1). */
function matrix(key) {
  return key !== "w_v" && state.lookup.dk === 1 ? state.lookup.narrow[key] : state.proj[key];
}
function query() {
  const i = Number(state.lookup.query);
  return Number.isInteger(i) && i >= 0 && i < n() ? i : 0;
}
function request() {
  // a copy: the state's matrices are edited in place, and the answer keeps what it answers
  return structuredClone({ x: points(), w_q: matrix("w_q"), w_k: matrix("w_k"),
    w_v: matrix("w_v"), query: query() });
}
const fresh = () => answer && JSON.stringify(answer.request) === JSON.stringify(request());
const isLearned = () => learned && state.lookup.dk === 2 && state.proj.shape === learned.shape
  && ["w_q", "w_k", "w_v"].every((k) => JSON.stringify(state.proj[k]) === JSON.stringify(learned[k]));
/** How the points of the shape follow each other: on the circle, counter-clockwise. */
const NEIGHBOURS = {
  circle: ["its counter-clockwise neighbour", "its clockwise neighbour"],
  letter: ["the next point (i + 1; the last wraps to 0)", "the previous point (i − 1)"],
};

export function show() {
  stopPlay();
  renderEditors();
  renderPlanes();
  channel.send(request());
  showFrozen();
}

/** Pixel position of (x, y). A point beyond the plane is drawn on its edge (and the plane
 * says so): its true numbers are in the tables. */
function toPx(x, y) {
  const u = PLANE.size / (2 * PLANE.range);
  const edge = (z) => Math.max(-PLANE.range, Math.min(PLANE.range, z));
  return [PLANE.size / 2 + edge(x) * u, PLANE.size / 2 - edge(y) * u];
}
const beyond = (p) => p.some((z) => Math.abs(z) > PLANE.range);

/** One plane: the shape through `pts` (n × 2), its points (the selected one ringed; coloured by
 * the selected query's weight when `weights` is given), W's basis knobs, the output marker. */
function shapePlane(title, pts, kind, opts = {}) {
  const { basis, weights, dots, out, line } = opts;
  const plane = svg("svg", { viewBox: `0 0 ${PLANE.size} ${PLANE.size}`,
    width: PLANE.size, height: PLANE.size, cls: "proj-plane",
    "data-testid": `proj-plane-${title}`, role: "group",
    "aria-label": `${title}${basis ? ` = X ${basis.label}` : ": the input shape"}` +
      (line ? ", on a line (d = 1)" : "") + (basis && basis.knobs
      ? `; its basis arrows are buttons, arrow keys move them` : "") });
  const [cx, cy] = toPx(0, 0);
  plane.append(svg("line", { x1: 0, y1: cy, x2: PLANE.size, y2: cy, cls: line ? "axis line" : "axis" }));
  if (!line) plane.append(svg("line", { x1: cx, y1: 0, x2: cx, y2: PLANE.size, cls: "axis" }));
  let d = "";
  let pen = false;
  for (const i of SHAPE_PATHS[state.proj.shape]) {
    if (i === null) { pen = false; continue; }
    const [x, y] = toPx(...pts[i]);
    d += `${pen ? "L" : "M"} ${x.toFixed(1)} ${y.toFixed(1)} `;
    pen = true;
  }
  plane.append(svg("path", { d, cls: `shape ${kind}` }));
  const sel = query();
  // W's knobs first: the point labels are placed around them, never under them
  const tips = basis && basis.knobs
    ? basis.m.map((row) => toPx(row[0], row.length > 1 ? row[1] : 0)) : [];
  const offsets = fanOut(tips);
  const knobs = tips.map(([x, y], r) => ({ x: x + offsets[r][0], y: y + offsets[r][1], r: 10 }));
  const labels = [];
  pts.forEach((p, i) => {
    const [x, y] = toPx(...p);
    const dot = svg("circle", { cx: x, cy: y, r: weights ? 5 : 3.5,
      cls: `pt ${kind}${i === sel && !weights ? " sel" : ""}${weights ? " weighted" : ""}`,
      "data-i": i });
    if (weights) {
      dot.style.fill = heat(weights[i]);
      const tip = svg("title");
      tip.textContent = `${kind[0]}${i}: weight ${fmt(weights[i], 3)}` +
        (dots ? `, q${sel} · k${i} = ${fmt(dots[i], 3)}` : "");
      dot.append(tip);
    }
    plane.append(dot);
    // outward from the origin first (the shape's inside is crowded), then all round
    const spots = spotsAround(x, y, 9 * zoom, PT_FONT * zoom);
    const a = Math.atan2(-(y - cy), x - cx);
    const k = Math.round(((a < 0 ? a + 2 * Math.PI : a) / (Math.PI / 4))) % 8;
    labels.push({ spots: [...spots.slice(k, 8), ...spots.slice(0, k), ...spots.slice(8)],
      text: String(i), font: PT_FONT * zoom, cls: "pt-label", attrs: { "data-testid": `pt-label-${title}-${i}` } });
  });
  if (pts.some(beyond) || (out && beyond(out)) || (basis && basis.m.some(beyond))) {
    const note = svg("text", { x: 4, y: PLANE.size - 5, cls: "edge-note",
      "data-testid": `proj-edge-${title}` });
    note.textContent = `beyond ±${PLANE.range}: on the edge`;
    zoomText(note, EDGE_FONT);
    plane.append(note);
  }
  // the labels in order of importance, none over a knob or another label: the knobs' names
  // (inside their buttons), out, then the points
  const first = [];
  const groups = [];
  if (basis && basis.knobs) {
    basis.m.forEach((row, r) => {
      const [x, y] = tips[r];
      const [dx, dy] = offsets[r];
      plane.append(svg("line", { x1: cx, y1: cy, x2: x, y2: y, cls: `basis b${r}` }));
      const g = svg("g", { cls: "basis-handle", tabindex: 0, role: "button",
        "data-mat": basis.key, "data-row": r, "data-testid": `basis-${basis.key}-${r}`,
        "aria-label": `${basis.label} row ${r} (the image of e${r}) at (${row.map((z) => fmt(z, 2)).join(", ")}): drag or use the arrow keys` });
      if (dx || dy) g.append(svg("line", { x1: x, y1: y, x2: x + dx, y2: y + dy, cls: "tether" }));
      g.append(svg("circle", { cx: x + dx, cy: y + dy, r: 8, cls: `handle-knob b${r}` }));
      first.push({ spots: spotsAround(x + dx, y + dy, 11 * zoom, KNOB_FONT * zoom), text: `e${r}`,
        font: KNOB_FONT * zoom, cls: "knob-name" }); // beside its button, not in it: the knob's box
      // stays the circle (a drag starts from its middle)
      groups.push(g);
    });
  }
  if (out) {
    const [x, y] = toPx(...out);
    plane.append(svg("path", { d: `M ${x} ${y - 7} L ${x + 7} ${y} L ${x} ${y + 7} L ${x - 7} ${y} Z`,
      cls: "out-mark", "data-testid": "proj-out-mark" }));
    const around = spotsAround(x, y, 11 * zoom, PT_FONT * zoom);
    first.push({ spots: around.slice(7).concat(around),
      text: `out${sel}`, font: PT_FONT * zoom, cls: "out-label", attrs: { "data-testid": "proj-out-label" } });
  }
  placeLabels(plane, [...first, ...labels], { knobs: knobs.map((c) => ({ ...c, r: c.r + 2 })),
    bounds: { x0: 0, y0: 0, x1: PLANE.size, y1: PLANE.size } });
  plane.querySelectorAll("text.pt-label, text.out-label").forEach((t) => zoomText(t, PT_FONT));
  plane.querySelectorAll("text.knob-name").forEach((t) => zoomText(t, KNOB_FONT));
  plane.append(...groups); // the knobs on top of everything
  return el("figure", { cls: "proj-fig" }, [plane, el("div", { cls: "plane-title" },
    title === "X" ? "X (the input)" : `${title} = X ${basis.label}` + (line ? " (a line)" : ""))]);
}

/** Q, K, V drawn at the morph's t from the server's frames, or (while an answer is on its way)
 * by the local product. */
function renderPlanes(redrawn = false) {
  const x = points();
  const local = (m) => x.map(([a, b]) => m[0].length > 1
    ? [a * m[0][0] + b * m[1][0], a * m[0][1] + b * m[1][1]] : [a * m[0][0] + b * m[1][0], 0]);
  const ok = fresh();
  const frame = Math.round(t * (ok ? answer.data.frames_per_step : 10));
  const morphing = ok && t < 3;
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.testid : null;
  const sel = ok ? answer.data.selected : null;
  const figs = [shapePlane("X", x, "x")];
  for (const [key, label, title, kind] of MATS) {
    const m = matrix(key);
    const pts = ok ? answer.data.factors[key].frames[frame] : local(m);
    figs.push(shapePlane(title, pts, kind, {
      basis: { key, label, m, knobs: !morphing },
      line: m[0].length === 1 && !morphing,
      weights: sel && kind !== "query" ? sel.weights : null,
      dots: sel && kind === "key" ? sel.dots : null,
      out: sel && kind === "value" && !morphing
        ? (answer.data.d_v === 2 ? sel.output : [sel.output[0], 0]) : null,
    }));
  }
  $("#proj-planes-box").replaceChildren(...figs);
  // drawn smaller than their 220 units (a phone): once more with the text zoomed to stay legible
  const want = textZoom();
  if (Math.abs(want - zoom) > 0.01 && !redrawn) {
    zoom = want;
    renderPlanes(true);
    return;
  }
  $("#proj-morph-note").textContent = morphNote(ok);
  if (focused) {
    const again = $(`[data-testid="${focused}"]`);
    if (again && again.closest("#proj-planes-box")) again.focus();
  }
}

function morphNote(ok) {
  if (t >= 3) return "t = 3: Q, K, V as X W (drag the orange knobs to change W)";
  const step = Math.min(2, Math.floor(t));
  const said = ok ? MATS.map(([key, label]) => `${label}: ${stepWords(answer.data.factors[key], step)}`)
    .join("; ") : "";
  return `t = ${t.toFixed(1)}: step ${step + 1} of 3, ${STEP_NAMES[step]} — ${said}`;
}

/** "turn 58.28° clockwise" … for one step of one W's factors. */
function stepWords(f, step) {
  if (step === 1) return stretchWords(f);
  const a = f.angles[step === 0 ? 0 : 1];
  if (step === 2 && f.shape[1] === 1) return "nothing to turn on a line";
  const shown = fmt(Math.abs(a), 2);
  if (Number(shown) === 0) return "no turn (0°)";
  return `turn ${shown}° ${a > 0 ? "counter-clockwise" : "clockwise"}`;
}
function stretchWords(f) {
  if (f.shape[1] === 1) {
    return `keep x × ${fmt(f.factors[0], 3)} and drop y: the plane lands on a line`;
  }
  const [a, b] = f.factors;
  const along = (s, axis) => (s < 0 ? `× ${fmt(-s, 3)} along ${axis} and flip it (a mirror)`
    : `× ${fmt(s, 3)} along ${axis}`);
  let said = `stretch ${along(a, "x")} and ${along(b, "y")}`;
  if (f.rank < 2) said += f.rank === 1 ? ": the plane is flattened onto a line (rank 1)" : ": every point goes to 0";
  return said;
}

function renderEditors() {
  const box = $("#proj-mats");
  if (!$("#proj-planes-box")) {
    box.replaceChildren(el("div", { id: "proj-planes-box", cls: "proj-planes" }),
      el("p", { id: "proj-morph-note", cls: "note", "data-testid": "proj-morph-note" }),
      el("div", { id: "proj-editors", cls: "proj-editors" }));
  }
  const editors = $("#proj-editors");
  const focused = document.activeElement && document.activeElement.closest
    && document.activeElement.closest("#proj-editors") ? document.activeElement.dataset.testid : null;
  editors.replaceChildren(...MATS.map(([key, label]) => {
    const m = matrix(key);
    const cells = [];
    m.forEach((row, r) => row.forEach((x, c) => {
      const input = el("input", { value: String(x), size: 5, "data-testid": `${key}-${r}-${c}`,
        "aria-label": `${label} row ${r} column ${c}` });
      input.addEventListener("change", () => {
        const v = Number(input.value);
        if (!Number.isFinite(v) || input.value.trim() === "") {
          input.classList.add("bad");
          showError(name, new ApiError(0, `${label} row ${r}, column ${c}: “${input.value}” is ` +
            "not a number — type one, e.g. 0.5"));
          return;
        }
        matrix(key)[r][c] = v;
        writeURL();
        show();
      });
      cells.push(input);
    }));
    const narrow = m[0].length === 1;
    const select = el("select", { "data-testid": `preset-${key}`, "aria-label": `${label} preset` },
      [el("option", { value: "" }, "preset…"),
        ...Object.keys(narrow ? PRESETS_1 : PRESETS).map((p) => el("option", { value: p }, p)),
        ...(narrow ? [] : [el("option", { value: "learned" }, "learned (trained)")])]);
    select.addEventListener("change", () => {
      const p = select.value;
      if (p === "learned") {
        if (!learned) return;
        for (const k of ["w_q", "w_k", "w_v"]) state.proj[k] = structuredClone(learned[k]);
        state.proj.shape = learned.shape || state.proj.shape;
        $("#proj-shape").value = state.proj.shape;
        announce(`learned matrices loaded: ${learned.source}`);
      } else if (p && narrow) {
        state.lookup.narrow[key] = structuredClone(PRESETS_1[p]);
      } else if (p) {
        state.proj[key] = structuredClone(PRESETS[p]);
      }
      writeURL();
      show();
    });
    return el("div", { cls: "mat-editor" }, [
      el("div", { cls: "mat-title" }, `${label} (2 × ${m[0].length})`),
      el("div", { cls: narrow ? "mat-grid narrow" : "mat-grid" }, cells), select]);
  }));
  if (focused) {
    const again = $(`[data-testid="${focused}"]`);
    if (again) again.focus();
  }
  const dk = state.lookup.dk;
  $("#proj-shapes").textContent = `X is ${n()} × 2 (n × d_model) → Q, K: ${n()} × ${dk} ` +
    `(n × d_k), V: ${n()} × 2 (n × d_v); d_model = 2, d_k = ${dk}, d_v = 2`;
  renderPicker();
}

/** The query points as a radio group: click one, or move with the arrow keys. */
function renderPicker() {
  const sel = query();
  const focused = document.activeElement && document.activeElement.closest
    && document.activeElement.closest("#proj-picker");
  $("#proj-picker").replaceChildren(...points().map((_, i) => el("button", {
    role: "radio", "aria-checked": String(i === sel), tabindex: i === sel ? 0 : -1,
    "data-i": i, "data-testid": `proj-pick-${i}`, "aria-label": `query point ${i}`,
    cls: i === sel ? "pick on" : "pick" }, `q${i}`)));
  if (focused) $(`[data-testid="proj-pick-${sel}"]`).focus();
}

function select(i) {
  state.lookup.query = i;
  writeURL();
  show();
}

// -- the result -------------------------------------------------------------------------------
function renderResult(data) {
  const t3 = data.trace;
  const sel = data.selected;
  $("#proj-result").replaceChildren(
    lookupBox(data), taskBox(data),
    el("h3", {}, "Each W as rotation · stretch · rotation (its SVD, W = U S Vᵀ)"),
    el("div", { cls: "svd-row" }, MATS.map(([key, label]) => svdBox(key, label, data.factors[key]))),
    el("h3", {}, "The numbers"),
    el("div", { cls: "steps" }, [
      table("X", data.shapes.X, "proj-x", points(), "x", "d"),
      table("Q = X W_Q", data.shapes.Q, "proj-q", data.q, "q", "d"),
      table("K = X W_K", data.shapes.K, "proj-k", data.k, "k", "d"),
      table("V = X W_V", data.shapes.V, "proj-v", data.v, "v", "d"),
      el("div", { cls: "step" }, [
        el("h4", {}, `weights = softmax(Q Kᵀ/√${data.d_k}): ${data.shapes.weights}`),
        matrixTable("proj-weight", t3.weights, "q", "k", { heat: true, digits: 3 })]),
      table("output = weights V", data.shapes.output, "proj-output", t3.output, "q", "d"),
    ]), legend("proj-legend"));
  const row = $(`[data-testid="table-proj-weight"]`).rows[sel.i + 1];
  if (row) row.classList.add("selected-row");
  announce(`query ${sel.i}: largest weight on key ${sel.top.join(", ")}; ` +
    `${data.lookups.self_count} of ${data.n} points attend most to themselves`);
}

function table(title, shape, testName, rows, rowPrefix, colPrefix) {
  return el("div", { cls: "step" }, [el("h4", {}, `${title}: ${shape}`),
    matrixTable(testName, rows, rowPrefix, colPrefix, { digits: 3 })]);
}

/** The selected query's lookup: its dot products, scaled scores, weights, the blended output,
 * and where its largest weight falls, in words from those numbers. */
function lookupBox(data) {
  const s = data.selected;
  const i = s.i;
  const [next, previous] = NEIGHBOURS[state.proj.shape];
  const where = (j) => (j === i ? "itself" : j === (i + 1) % data.n ? next
    : j === (i - 1 + data.n) % data.n ? previous : `point ${j}`);
  const top = s.top.length === 1
    ? `its largest weight, ${fmt(s.weights[s.top[0]], 3)}, falls on k${s.top[0]} (${where(s.top[0])})`
    : `its largest weight, ${fmt(s.weights[s.top[0]], 3)}, is shared by ${s.top.length} keys (${s.top.map((j) => `k${j}`).join(", ")})`;
  const qs = `(${s.q.map((z) => fmt(z, 3)).join(", ")})`;
  const sentences = [`Query point ${i} asks with q${i} = ${s.q.length === 1 ? fmt(s.q[0], 3) : qs}. ` +
    `Its dot product with each key, times 1/√${data.d_k} = ${fmt(s.scale, 4)}, goes through ` +
    `softmax: ${top}. The blended output out${i} = Σ_j w_j v_j = ` +
    `(${s.output.map((z) => fmt(z, 3)).join(", ")}) is the ◆ on the V plane.`];
  if (data.d_k === 1) {
    const q = s.q[0];
    sentences.push(q === 0 ? `With d_k = 1 every query and key is one number; q${i} = 0, so every score is 0 and the weights are equal.`
      : `With d_k = 1 every query and key is one number, so q${i}'s weights depend only on the one number q${i} = ${fmt(q, 3)}: ` +
        `${q > 0 ? "positive, so the larger a key, the larger its weight" : "negative, so the smaller a key, the larger its weight"}. ` +
        `${data.n - data.lookups.tied} of ${data.n} queries put their largest weight on one of ` +
        `${data.lookups.keys_used.length} key${data.lookups.keys_used.length === 1 ? "" : "s"}` +
        `${data.lookups.keys_used.length ? ` (${data.lookups.keys_used.map((j) => `k${j}`).join(", ")})` : ""}` +
        `${data.lookups.tied ? `; the other ${data.lookups.tied} tie` : ""}.`);
  }
  const look = data.lookups;
  const counts = `Where each point's largest weight falls: on itself for ${look.self_count} of ${data.n}, ` +
    `on ${next} for ${look.next_count}, on ${previous} for ${look.previous_count}, ` +
    `elsewhere for ${data.n - look.self_count - look.next_count - look.previous_count - look.tied}` +
    `${look.tied ? `, tied for ${look.tied}` : ""}.`;
  const box = el("div", { cls: "lookup", "data-testid": "proj-lookup" }, [
    el("h3", {}, `Query point ${i}: who it looks up`),
    ...(isLearned() ? [el("p", { cls: "learned-note", "data-testid": "proj-learned" },
      `What training produced: scripts/fit_projection_toy.py trained W_Q, W_K, W_V so that each ` +
      `point of the circle outputs its counter-clockwise neighbour. With these matrices, for ` +
      `${look.next_count} of ${data.n} points the largest weight falls on the counter-clockwise ` +
      `neighbour; for query ${i} it is ${s.top.length === 1 ? `k${s.top[0]}` : "a tie"}` +
      `${s.top.length === 1 && s.top[0] === (i + 1) % data.n ? ", its neighbour" : ""}.`)] : []),
    ...sentences.map((text) => el("p", { "data-testid": "proj-lookup-said" }, text)),
    lookupTable(s, data),
    el("p", { cls: "note", "data-testid": "proj-counts" }, counts),
  ]);
  return box;
}

function lookupTable(s, data) {
  const head = el("tr", {}, [el("th", {}, "key j"), el("th", {}, `q${s.i} · k_j`),
    el("th", {}, `÷ √${data.d_k}`), el("th", {}, "weight")]);
  const rows = s.dots.map((dot, j) => {
    const w = el("td", { "data-testid": `proj-sel-weight-${j}`, "data-value": s.weights[j] },
      fmt(s.weights[j], 3));
    paint(w, s.weights[j]);
    return el("tr", { cls: s.top.includes(j) ? "top" : "" }, [el("th", {}, `k${j}`),
      el("td", { "data-testid": `proj-sel-dot-${j}`, "data-value": dot }, fmt(dot, 3)),
      el("td", { "data-testid": `proj-sel-scaled-${j}`, "data-value": s.scaled[j] },
        fmt(s.scaled[j], 3)), w]);
  });
  const out = el("tr", {}, [el("th", {}, `out${s.i}`),
    ...s.output.map((z, c) => el("td", { "data-testid": `proj-sel-out-${c}`, "data-value": z },
      fmt(z, 3))), ...(s.output.length < 3 ? [el("td", {}, "← Σ_j w_j v_j")] : [])]);
  return scrollBox([el("table", { cls: "matrix lookup-table", "data-testid": "table-proj-sel" },
    [el("caption", {}, `query ${s.i} against the ${data.n} keys: ${data.n} × 3`), head, ...rows,
      out])], `query ${s.i}'s lookup`);
}

/** The guided task, checked against the current numbers. */
function taskBox(data) {
  const look = data.lookups;
  const n = data.n;
  const astray = look.top.map((top, i) => (top.length === 1 && top[0] === i ? null : i))
    .filter((i) => i !== null);
  // the oracle's bound (the server's can_self): a score is linear in the key, so only the
  // corners of the shape's outline can be their own query's largest — the task asks for those
  const can = look.can_self;
  const most = can.length;
  const inside = Array.from({ length: n }, (_, i) => i).filter((i) => !can.includes(i));
  const list = (xs) => xs.join(", ");
  const bound = most === n ? "" : ` At most ${most} of ${n} can: the score q·k is linear in ` +
    `the key, so only a corner of the shape's outline (points ${list(can)}) can be its own ` +
    `query's largest; point${inside.length === 1 ? "" : "s"} ${list(inside)} ` +
    `${inside.length === 1 ? "lies" : "lie"} on an edge or inside it.`;
  const done = look.self_count === most;
  const said = done ? (most === n
    ? `Done: all ${n} of ${n} points put their largest weight on themselves.`
    : `Done: ${most} of ${n} points put their largest weight on themselves, as many as can.` +
      bound)
    : `${look.self_count} of ${n} points put their largest weight on themselves; ` +
      `point${astray.length === 1 ? "" : "s"} ${list(astray)} look${astray.length === 1 ? "s" : ""} elsewhere` +
      `${data.d_k === 1 ? ` (with d_k = 1 every largest weight lands on one of ${look.keys_used.length} key${look.keys_used.length === 1 ? "" : "s"}: try d_k = 2)` : ""}.` +
      bound;
  return el("div", { cls: done ? "task done" : "task", "data-testid": "proj-task" }, [
    el("strong", {}, most === n ? "Task: find a W_K that makes every point attend to itself. "
      : "Task: find a W_K that makes every point that can attend to itself do so. "),
    el("span", { "data-testid": "proj-task-said" }, said)]);
}

/** One W as U · S · Vᵀ: the three matrices and each step in words. */
function svdBox(key, label, f) {
  const [rows, d] = f.shape;
  const steps = [0, 1, 2].map((step) => el("li", { cls: Math.min(2, Math.floor(t)) === step && t < 3 ? "now" : "" },
    `${["U", "S", "Vᵀ"][step]}: ${stepWords(f, step)}`));
  const notes = [];
  if (f.reflection) {
    notes.push(`det ${label} < 0: ${label} mirrors the shape. No turn can do that, so the ` +
      `mirror is written as the negative stretch ${fmt(f.factors[1], 3)} along y.`);
  }
  return el("div", { cls: "svd", "data-testid": `svd-${key}` }, [
    el("h4", {}, `${label} (${rows} × ${d}) = U (2 × 2) · S (2 × ${d}) · Vᵀ (${d} × ${d})`),
    el("ol", {}, steps),
    ...notes.map((text) => el("p", { cls: "note", "data-testid": `svd-${key}-reflection` }, text)),
    el("div", { cls: "svd-mats" }, [["u", `U (2 × 2)`, f.u], ["s", `S (2 × ${d})`, f.stretch],
      ["vt", `Vᵀ (${d} × ${d})`, f.vt]].map(([part, title, m]) => el("div", {}, [
      el("div", { cls: "note" }, title), matrixTable(`svd-${key}-${part}`, m, "", "", { digits: 3 })]))),
  ]);
}

// -- the morph --------------------------------------------------------------------------------
function setT(value) {
  t = Math.max(0, Math.min(3, Math.round(value * 10) / 10));
  $("#proj-t").value = String(t);
  $("#proj-t-value").textContent = t.toFixed(1);
  renderPlanes();
  if (answer && fresh()) {
    $$svd().forEach((box, b) => {
      const f = answer.data.factors[MATS[b][0]];
      box.querySelectorAll("li").forEach((li, step) => {
        li.className = Math.min(2, Math.floor(t)) === step && t < 3 ? "now" : "";
        li.textContent = `${["U", "S", "Vᵀ"][step]}: ${stepWords(f, step)}`;
      });
    });
  }
}
const $$svd = () => Array.from(root.querySelectorAll(".svd"));

function stopPlay() {
  if (playing) clearInterval(playing);
  playing = null;
  if (root) $("#proj-play").textContent = "▶ play";
}

function play() {
  if (playing) { stopPlay(); return; }
  if (t >= 3) setT(0);
  $("#proj-play").textContent = "❚❚ pause";
  playing = setInterval(() => {
    setT(t + 0.1);
    if (t >= 3) stopPlay();
  }, 120);
}

export function mount(section) {
  root = section;
  mountFrozen($("#proj-frozen"), (wq, wk, wv, label) => { // a frozen-W run, into the planes
    for (const [k, w] of [["w_q", wq], ["w_k", wk], ["w_v", wv]]) state.proj[k] = structuredClone(w);
    state.proj.shape = "circle";
    state.lookup.dk = 2;
    $("#proj-shape").value = "circle";
    $("[data-testid='proj-dk-2']").checked = true;
    announce(`W_Q, W_K, W_V of the run "${label}" loaded`);
    writeURL();
    show();
    $("#proj-mats").scrollIntoView({ block: "start" });
  });
  $("#proj-shape").addEventListener("change", () => {
    state.proj.shape = $("#proj-shape").value;
    writeURL();
    show();
  });
  for (const radio of root.querySelectorAll("input[name=proj-dk]")) {
    radio.addEventListener("change", () => {
      state.lookup.dk = Number(radio.value);
      writeURL();
      show();
    });
  }
  $("#proj-t").addEventListener("input", () => {
    stopPlay();
    setT(Number($("#proj-t").value));
  });
  $("#proj-play").addEventListener("click", play);
  const picker = $("#proj-picker");
  picker.addEventListener("click", (event) => {
    const button = event.target.closest("[data-i]");
    if (button) select(Number(button.dataset.i));
  });
  picker.addEventListener("keydown", (event) => {
    const by = { ArrowRight: 1, ArrowDown: 1, ArrowLeft: -1, ArrowUp: -1 }[event.key];
    if (!by) return;
    event.preventDefault();
    select((query() + by + n()) % n());
  });
  const box = $("#proj-mats");
  let drag = null;
  const pointIn = (event, planeEl) => {
    const p = svgPoint(planeEl, event);
    const u = PLANE.size / (2 * PLANE.range);
    const snap = (z) => Math.round(Math.max(-PLANE.range, Math.min(PLANE.range, z)) * 20) / 20;
    return [snap((p.x - PLANE.size / 2) / u), snap((PLANE.size / 2 - p.y) / u)];
  };
  box.addEventListener("pointerdown", (event) => {
    const point = event.target.closest("circle.pt");
    if (point && point.closest("[data-testid='proj-plane-X'], [data-testid='proj-plane-Q']")) {
      select(Number(point.dataset.i));
      return;
    }
    const handle = event.target.closest(".basis-handle");
    if (!handle) return;
    drag = { key: handle.dataset.mat, row: Number(handle.dataset.row),
      plane: handle.closest("svg").dataset.testid };
    box.setPointerCapture(event.pointerId);
    event.preventDefault();
  });
  box.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const at = pointIn(event, $(`[data-testid="${drag.plane}"]`));
    const m = matrix(drag.key);
    m[drag.row] = m[drag.row].length === 1 ? [at[0]] : at;
    show();
  });
  const stop = () => {
    if (drag) writeURL();
    drag = null;
  };
  box.addEventListener("pointerup", stop);
  box.addEventListener("pointercancel", stop);
  box.addEventListener("keydown", (event) => {
    const handle = event.target.closest(".basis-handle");
    const step = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, 1], ArrowDown: [0, -1] }[event.key];
    if (!handle || !step) return;
    event.preventDefault();
    const by = event.shiftKey ? 0.25 : 0.05;
    const row = matrix(handle.dataset.mat)[Number(handle.dataset.row)];
    const move = row.length === 1 ? [step[0] || step[1]] : step; // on a line, ↑ and → both grow
    move.forEach((s, c) => { row[c] = Math.round((row[c] + s * by) * 100) / 100; });
    writeURL();
    show();
  });
}

/** A hand-edited URL may hold anything: keep d_k ∈ {1, 2} and 2 × 1 matrices of numbers. */
function tidyLookup() {
  const l = state.lookup;
  if (l.dk !== 1 && l.dk !== 2) l.dk = LOOKUP_DEFAULTS.dk;
  const narrow = (m) => Array.isArray(m) && m.length === 2 && m.every((row) => Array.isArray(row)
    && row.length === 1 && Number.isFinite(row[0]));
  if (!l.narrow || typeof l.narrow !== "object") l.narrow = structuredClone(LOOKUP_DEFAULTS.narrow);
  for (const key of ["w_q", "w_k"]) {
    if (!narrow(l.narrow[key])) l.narrow[key] = structuredClone(LOOKUP_DEFAULTS.narrow[key]);
  }
}

export function sync() {
  tidyLookup();
  $("#proj-shape").value = state.proj.shape;
  for (const radio of root.querySelectorAll("input[name=proj-dk]")) {
    radio.checked = Number(radio.value) === state.lookup.dk;
  }
}

// View 2 · Vectors: each query asks, each key offers, each value is passed along. Arrows on a
// plane (dimensions 0 and 1) that can be dragged or typed, and the five steps of
// softmax(Q Kᵀ/√d_k) V as tables, all from qkv.explain (POST /api/trace).
import { ApiError, Channel } from "../core/api.js";
import { announce, el, fmt, parseVector, svg, svgPoint } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { legend } from "../core/legend.js";
import { SEED_EXAMPLE, state, writeURL } from "../core/state.js";
import { matrixTable } from "../core/table.js";

export const name = "vectors";
export const READS = {
  "/api/trace": ["trace.scores", "trace.scaled", "trace.weights", "trace.output",
    "trace.allowed", "trace.scale", "row_sums", "d_k", "exp.exp", "exp.sum", "exp.shifted",
    "exp.seed_sum"],
};

let root;
const $ = (sel) => root.querySelector(sel);

const PLANE = { size: 480, range: 2.5 }; // the plane shows [−range, range]²
const unit = PLANE.size / (2 * PLANE.range);
const toPx = (x, y) => [PLANE.size / 2 + x * unit, PLANE.size / 2 - y * unit];
const snap = (z) => Math.round(Math.max(-PLANE.range, Math.min(PLANE.range, z)) * 20) / 20;
let trace = null; // the last answer's trace
let drag = null;
let moved = ""; // what the keyboard just moved, said with the next result
const channel = new Channel(name, "/api/trace", (data) => {
  trace = data.trace;
  renderSteps(data);
  renderPlane();
});

function request() {
  const body = { queries: state.q, keys: state.k, values: state.v };
  const scale = String(state.scale).trim();
  if (scale !== "") body.scale = Number(scale);
  return body;
}

export function show() {
  const scale = String(state.scale).trim();
  if (scale !== "" && !Number.isFinite(Number(scale))) {
    showError(name, new ApiError(0, `scale: “${scale}” is not a number`));
    return;
  }
  channel.send(request());
}

// -- the plane -------------------------------------------------------------------------------
// where each kind of arrow writes its label (before collisions are resolved)
const LABEL_OFFSETS = {
  query: [-10, -10, "end"], key: [10, 18, "start"], value: [10, -8, "start"],
  output: [-10, 20, "end"],
};
const NAME_OF = { query: "q", key: "k", value: "v" };
const GRAB = 16; // px: handles closer than this would hide each other, so they fan out

function arrowLine(kind, index, vec) {
  const [x1, y1] = toPx(0, 0);
  const [x2, y2] = toPx(vec[0], vec.length > 1 ? vec[1] : 0);
  const g = svg("g", { cls: `arrow ${kind}`, "data-testid": `arrow-${kind}-${index}` });
  g.append(svg("line", { x1, y1, x2, y2, "marker-end": `url(#head-${kind})` }));
  return g;
}

/** Labels placed greedily: each one moves down until it overlaps no label placed before. */
function placeLabels(plane, labels) {
  const boxes = [];
  const overlaps = (b) => boxes.some((o) => b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1);
  for (const { x, y, anchor, text, kind, testid } of labels) {
    const width = 7.4 * text.length + 4;
    let top = y;
    const box = () => {
      const x0 = anchor === "end" ? x - width : x;
      return { x0, x1: x0 + width, y0: top - 12, y1: top + 3 };
    };
    for (let tries = 0; tries < 12 && overlaps(box()); tries += 1) top += 15;
    boxes.push(box());
    const node = svg("text", { x, y: top, cls: `label ${kind}`, "text-anchor": anchor,
      "data-testid": testid });
    node.textContent = text;
    plane.append(node);
  }
}

/** Draggable handles for the arrow heads. Heads at (nearly) the same point fan out around
 * it, each a visible knob with its name, so every vector stays reachable (q0 and k0 both start
 * at (1, 0) in the seeds' example). Each is a button for the keyboard: arrows move it. */
function placeHandles(plane, items) {
  const groups = [];
  for (const item of items) {
    const [x, y] = toPx(item.vec[0], item.vec.length > 1 ? item.vec[1] : 0);
    const group = groups.find((g) => Math.hypot(g.x - x, g.y - y) < GRAB);
    if (group) group.items.push(item);
    else groups.push({ x, y, items: [item] });
  }
  for (const group of groups) {
    const m = group.items.length;
    group.items.forEach((item, n) => {
      const angle = -Math.PI / 2 + (2 * Math.PI * n) / m;
      const dx = m > 1 ? 20 * Math.cos(angle) : 0;
      const dy = m > 1 ? 20 * Math.sin(angle) : 0;
      const label = `${NAME_OF[item.kind]}${item.index}`;
      const vec = item.vec.map((z) => fmt(z, 2)).join(", ");
      const g = svg("g", {
        cls: m > 1 ? "handle-group fanned" : "handle-group", tabindex: 0, role: "button",
        "aria-label": `${item.kind} ${label} at (${vec}): drag, or use the arrow keys to move it`,
        "data-kind": item.kind, "data-index": item.index, "data-dx": dx, "data-dy": dy,
        "data-testid": `handle-${item.kind}-${item.index}`,
      });
      if (m > 1) {
        g.append(svg("line", { x1: group.x, y1: group.y, x2: group.x + dx, y2: group.y + dy,
          cls: "tether" }));
      }
      g.append(svg("circle", { cx: group.x + dx, cy: group.y + dy, r: m > 1 ? 8 : 10,
        cls: `handle ${item.kind}`, "data-kind": item.kind, "data-index": item.index }));
      if (m > 1) {
        const t = svg("text", { x: group.x + dx, y: group.y + dy + 3.5, cls: "knob-label",
          "text-anchor": "middle" });
        t.textContent = label;
        g.append(t);
      }
      plane.append(g);
    });
  }
}

function renderPlane() {
  const plane = $("#plane");
  const focused = document.activeElement && document.activeElement.closest
    ? document.activeElement.closest("#plane [data-testid^='handle-']") : null;
  const refocus = focused ? focused.dataset.testid : null;
  plane.replaceChildren();
  plane.dataset.range = PLANE.range;
  const defs = svg("defs");
  for (const kind of ["query", "key", "value", "output"]) {
    const marker = svg("marker", {
      id: `head-${kind}`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
      markerHeight: 7, orient: "auto-start-reverse", cls: `marker ${kind}`,
    });
    marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z" }));
    defs.append(marker);
  }
  plane.append(defs);
  for (let t = -PLANE.range; t <= PLANE.range; t += 0.5) {
    const [a] = toPx(t, 0);
    const [, b] = toPx(0, t);
    const cls = t === 0 ? "axis" : Number.isInteger(t) ? "grid" : "grid minor";
    plane.append(svg("line", { x1: a, y1: 0, x2: a, y2: PLANE.size, cls }));
    plane.append(svg("line", { x1: 0, y1: b, x2: PLANE.size, y2: b, cls }));
  }
  const selected = 0;
  const weights = trace && trace.weights.length === state.q.length
    && trace.weights[0].length === state.k.length ? trace.weights : null;
  const labels = [];
  const handles = [];
  const label = (kind, index, vec, text) => {
    const [x2, y2] = toPx(vec[0], vec.length > 1 ? vec[1] : 0);
    const [dx, dy, anchor] = LABEL_OFFSETS[kind];
    labels.push({ x: x2 + dx, y: y2 + dy, anchor, text, kind,
      testid: `label-${kind}-${index}` });
  };
  // labels are placed in order of importance: queries, keys, outputs, values
  state.q.forEach((q, i) => label("query", i, q, `q${i}`));
  state.k.forEach((k, j) => {
    const w = weights ? `  w=${fmt(weights[selected][j], 3)}` : "";
    label("key", j, k, `k${j}${w}`);
  });
  if ($("#show-outputs").checked && trace && weights) {
    trace.output.forEach((o, i) => label("output", i, o, `out${i}`));
  }
  if ($("#show-values").checked) {
    state.v.forEach((v, j) => {
      plane.append(arrowLine("value", j, v));
      label("value", j, v, `v${j}`);
      handles.push({ kind: "value", index: j, vec: v });
    });
  }
  state.k.forEach((k, j) => {
    plane.append(arrowLine("key", j, k));
    handles.push({ kind: "key", index: j, vec: k });
  });
  if ($("#show-outputs").checked && trace && weights) {
    trace.output.forEach((o, i) => plane.append(arrowLine("output", i, o)));
  }
  state.q.forEach((q, i) => {
    plane.append(arrowLine("query", i, q));
    handles.push({ kind: "query", index: i, vec: q });
  });
  placeLabels(plane, labels);
  placeHandles(plane, handles);
  if (refocus) {
    const again = $(`#plane [data-testid="${refocus}"]`);
    if (again) again.focus();
  }
}

// -- the editors -------------------------------------------------------------------------------
const vectorText = (vec) => vec.join(", ");

function vectorInput(kind, index, vec) {
  const input = el("input", {
    value: vectorText(vec), size: 14, "data-testid": `${kind}-input-${index}`,
    "aria-label": `${kind} ${index}`,
  });
  input.addEventListener("input", () => {
    const parsed = parseVector(input.value);
    const letter = NAME_OF[kind];
    if (!parsed) {
      input.classList.add("bad");
      showError(name, new ApiError(0,
        `${letter}${index}: “${input.value}” is not a list of numbers (write e.g. 0.5, -1)`));
      return;
    }
    input.classList.remove("bad");
    moved = "";
    state[letter][index] = parsed;
    renderPlane();
    writeURL();
    show();
  });
  return input;
}

function removeButton(label, disabled, onClick, testid) {
  const button = el("button", { cls: "remove", disabled, "data-testid": testid, title: label },
    "×");
  button.addEventListener("click", onClick);
  return button;
}

function renderEditors() {
  const queries = $("#query-rows");
  queries.replaceChildren();
  state.q.forEach((q, i) => {
    queries.append(el("div", { cls: "row" }, [
      el("span", { cls: "tag query" }, `q${i}`), vectorInput("query", i, q),
      removeButton(`remove q${i}`, state.q.length === 1, () => {
        state.q.splice(i, 1);
        changed();
      }, `remove-query-${i}`),
    ]));
  });
  const keys = $("#key-rows");
  keys.replaceChildren();
  state.k.forEach((k, j) => {
    keys.append(el("div", { cls: "row" }, [
      el("span", { cls: "tag key" }, `k${j}`), vectorInput("key", j, k),
      el("span", { cls: "tag value" }, `v${j}`), vectorInput("value", j, state.v[j]),
      removeButton(`remove k${j} and v${j}`, state.k.length === 1, () => {
        state.k.splice(j, 1);
        state.v.splice(j, 1);
        changed();
      }, `remove-key-${j}`),
    ]));
  });
  const dk = state.q[0].length;
  $("#default-scale").textContent = `1/√${dk} = ${fmt(1 / Math.sqrt(dk))}`;
  $("#add-key").disabled = state.k.length >= 64;
  $("#add-query").disabled = state.q.length >= 64;
}

function changed() {
  renderEditors();
  renderPlane();
  writeURL();
  show();
}

// -- the five steps ----------------------------------------------------------------------------
/** One step: a title, a note, and a table whose rows are queries. */
function step(title, note, table) {
  return el("div", { cls: "step" }, [el("h4", {}, title), el("p", { cls: "note" }, note), table]);
}

function renderSteps(data) {
  const t = data.trace;
  const dk = data.d_k;
  const isDefault = Math.abs(t.scale - 1 / Math.sqrt(dk)) < 1e-15;
  const scaleText = isDefault ? `1/√${dk} = ${fmt(t.scale)}` : fmt(t.scale);
  $("#steps").replaceChildren(
    step("1 · scores = Q Kᵀ", "each query's dot product with each key",
      matrixTable("scores", t.scores, "q", "k")),
    step(`2 · scaled = scores × ${scaleText}`,
      "dividing by √d_k keeps softmax out of its hard-argmax regime",
      matrixTable("scaled", t.scaled, "q", "k")),
    step(data.exp.shifted.some(Boolean)
      ? "3 · e^(scaled − row max), and each row's sum" : "3 · e^scaled, and each row's sum",
    expNote(data.exp), matrixTable("exp", data.exp.exp, "q", "k",
      { rowSums: data.exp.sum, sumId: "exp-sum", sumDigits: 3 })),
    step("4 · weights = softmax(scaled) = e^scaled / sum",
      "each row sums to 1: a soft, graded lookup", matrixTable("weight", t.weights, "q", "k",
        { heat: true, rowSums: data.row_sums, sumId: "rowsum", sumDigits: 4,
          allowed: t.allowed })),
    step("5 · output = weights V", "each query's blend of the values",
      matrixTable("output", t.output, "q", "d")),
    legend("vectors-legend"),
  );
  const w = t.weights[0].map((x) => fmt(x, 3)).join(", ");
  announce(`${moved}weights of q0: ${w}; output (${t.output[0].map((x) => fmt(x, 3)).join(", ")})`);
}

/** Why the seed's hand-added sum can differ in the last digit from the exact one. */
function expNote(exp) {
  const exact = fmt(exp.sum[0], 3);
  const seed = fmt(exp.seed_sum[0], 3);
  const terms = exp.exp[0].map((x) => fmt(x, 3)).join(" + ");
  if (exp.shifted[0]) {
    return "the scores are too large for e^x, so each row is shifted by its largest score " +
      "first — softmax gives the same weights either way";
  }
  return exact === seed ? `Σ = ${terms} = ${exact}`
    : `Σ = ${exact} exactly; the seed adds the rounded values ${terms} = ${seed} ` +
      "by hand, which is why it prints " + seed;
}

// -- moving the arrows -------------------------------------------------------------------------
function planePoint(event) {
  const p = svgPoint($("#plane"), event);
  return [snap((p.x - PLANE.size / 2) / unit), snap((PLANE.size / 2 - p.y) / unit)];
}

function moveVector(kind, index, vec) {
  state[NAME_OF[kind]][index] = vec;
  const input = $(`[data-testid="${kind}-input-${index}"]`);
  if (input) input.value = vectorText(vec);
  renderPlane();
  show();
}

export function mount(section) {
  root = section;
  const plane = $("#plane");
  plane.addEventListener("pointerdown", (event) => {
    const handle = event.target.closest(".handle-group");
    if (!handle) return;
    moved = "";
    // the head follows the pointer (a fanned-out knob's head jumps the few px to it)
    drag = { kind: handle.dataset.kind, index: Number(handle.dataset.index) };
    plane.setPointerCapture(event.pointerId);
    event.preventDefault();
  });
  plane.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const [x, y] = planePoint(event);
    const vec = state[NAME_OF[drag.kind]][drag.index].slice();
    vec[0] = x;
    if (vec.length > 1) vec[1] = y;
    moveVector(drag.kind, drag.index, vec);
  });
  const stop = () => {
    if (drag) writeURL();
    drag = null;
  };
  plane.addEventListener("pointerup", stop);
  plane.addEventListener("pointercancel", stop);
  plane.addEventListener("keydown", (event) => {
    const handle = event.target.closest(".handle-group");
    const by = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, 1], ArrowDown: [0, -1] }[
      event.key];
    if (!handle || !by) return;
    event.preventDefault();
    const kind = handle.dataset.kind;
    const index = Number(handle.dataset.index);
    const size = event.shiftKey ? 0.25 : 0.05;
    const vec = state[NAME_OF[kind]][index].slice();
    vec[0] = snap(vec[0] + by[0] * size);
    if (vec.length > 1) vec[1] = snap(vec[1] + by[1] * size);
    moveVector(kind, index, vec);
    writeURL();
    moved = `${NAME_OF[kind]}${index} is now (${vec.map((z) => fmt(z, 2)).join(", ")}); `;
    announce(moved);
  });
  $("#add-query").addEventListener("click", () => {
    const d = state.q[0].length;
    state.q.push(Array.from({ length: d }, (_, i) => (i === 1 ? 1 : 0)));
    changed();
  });
  $("#add-key").addEventListener("click", () => {
    const d = state.k[0].length;
    const dv = state.v[0].length;
    state.k.push(Array.from({ length: d }, (_, i) => (i === 0 ? -1 : 0)));
    state.v.push(Array.from({ length: dv }, (_, i) => (i === 0 ? -1 : 0)));
    changed();
  });
  $("#scale-input").addEventListener("input", () => {
    state.scale = $("#scale-input").value;
    writeURL();
    show();
  });
  $("#reset-vectors").addEventListener("click", () => {
    Object.assign(state, structuredClone(SEED_EXAMPLE), { scale: "" });
    $("#scale-input").value = "";
    changed();
  });
  for (const id of ["#show-values", "#show-outputs"]) {
    $(id).addEventListener("change", renderPlane);
  }
}

export function sync() {
  $("#scale-input").value = state.scale;
  renderEditors();
  renderPlane();
}

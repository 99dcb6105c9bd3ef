// View 2 · Vectors: each query asks, each key offers, each value is passed along. Arrows on a
// plane (dimensions 0 and 1) that can be dragged or typed, and the five steps of
// softmax(Q Kᵀ/√d_k) V as tables, all from qkv.explain (POST /api/trace).
import { ApiError, Channel } from "../core/api.js";
import { announce, el, fmt, parseVector, svg, svgPoint } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { legend } from "../core/legend.js";
import { fanOut } from "../core/fan.js";
import { placeLabels, spotsAround } from "../core/labels.js";
import { SEED_EXAMPLE, state, writeURL } from "../core/state.js";
import { matrixTable } from "../core/table.js";

export const name = "vectors";
export const READS = {
  "/api/trace": ["trace.q", "trace.k", "trace.v", "trace.scores", "trace.scaled", "trace.weights", "trace.output",
    "trace.allowed", "trace.scale", "row_sums", "d_k", "exp.exp", "exp.sum", "exp.shifted",
    "seed.exp_rounded", "seed.sum", "seed.weights_rounded", "seed.output"],
};
// the controls by the request fields they fill, so a server's complaint names the control
export const LABELS = {
  "queries[i]": (m) => `q${m[1]}`, "keys[i]": (m) => `k${m[1]}`, "values[i]": (m) => `v${m[1]}`,
  "queries": "queries", "keys": "keys", "values": "values", "scale": "scale",
};

let root;
const $ = (sel) => root.querySelector(sel);

const PLANE = { size: 480, range: 2.5 }; // the plane shows [−range, range]²
const unit = PLANE.size / (2 * PLANE.range);
const toPx = (x, y) => [PLANE.size / 2 + x * unit, PLANE.size / 2 - y * unit];
const snap = (z) => Math.round(Math.max(-PLANE.range, Math.min(PLANE.range, z)) * 20) / 20;
let trace = null; // the last answer's trace
let drag = null;
let moved = null; // {kind, index} the keyboard just moved, said with the answer to its inputs
const channel = new Channel(name, "/api/trace", (data, body) => {
  trace = data.trace;
  // an answer for inputs the learner has since changed is drawn (dragging stays smooth) but
  // not announced: the live region speaks only of the vectors as they are now
  renderSteps(data, JSON.stringify(body) === JSON.stringify(request()));
  renderPlane();
});

/** "k1 is now (0.15, 1.00); " for the vector the keyboard moved, read from the state now. */
function movedWords() {
  const vec = moved && state[NAME_OF[moved.kind]][moved.index];
  return vec ? `${NAME_OF[moved.kind]}${moved.index} is now (${vec.map((z) => fmt(z, 2)).join(", ")}); ` : "";
}

function request() {
  // copies: the body must stay the inputs it was sent for (an answer is matched against it)
  const copy = (rows) => rows.map((row) => row.slice());
  const body = { queries: copy(state.q), keys: copy(state.k), values: copy(state.v) };
  const scale = String(state.scale).trim();
  if (scale !== "") body.scale = Number(scale);
  return body;
}

export function show() {
  // a vector typed wrong keeps its error (and no answer for other inputs) until it is fixed
  const bad = root.querySelector("input.bad");
  if (bad) {
    showError(name, new ApiError(0, bad.dataset.problem));
    return;
  }
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

function arrowLine(kind, index, vec) {
  const [x1, y1] = toPx(0, 0);
  const [x2, y2] = toPx(vec[0], vec.length > 1 ? vec[1] : 0);
  const g = svg("g", { cls: `arrow ${kind}`, "data-testid": `arrow-${kind}-${index}` });
  g.append(svg("line", { x1, y1, x2, y2, "marker-end": `url(#head-${kind})` }));
  return g;
}

const LABEL_FONT = 14; // #plane .label in style.css, at full size
const KNOB_FONT = 13; // #plane .knob-label: the plane's smallest text
const KNOB = { plain: 10, fanned: 11 }; // knob radii (px of the plane)
const MIN_TEXT_PX = 11.5; // no text of the plane renders smaller, in CSS px
// How much larger than at full size the plane's text (and the knobs that hold names) is drawn:
// a phone shows the 480-unit plane ~370 px wide, which would render 13-unit text at 10 px.
let zoom = 1;

/** The zoom that keeps the smallest text ≥ MIN_TEXT_PX as rendered (the SVG's own scale). */
function textZoom(plane) {
  const shown = plane.getBoundingClientRect().width;
  return shown > 0 ? Math.max(1, (MIN_TEXT_PX * PLANE.size) / (KNOB_FONT * shown)) : 1;
}
/** Draw `node` (an SVG text) at `size` units times the zoom: through the CSSOM, which the
 * page's Content-Security-Policy allows where a style attribute would be refused. */
const zoomText = (node, size) => { node.style.fontSize = `${(size * zoom).toFixed(2)}px`; };
const MANY = 4; // more tokens than this: only q0's row is labelled (the rest are in the tables)

/** Spots for a label beside its arrow tip: its own side first, then the other side, a line
 * lower or higher, … (at most 3 lines away), then all round the tip. */
function labelSpots({ x, y, tip, anchor }) {
  const flipped = { x: 2 * tip[0] - x, anchor: anchor === "end" ? "start" : "end" };
  const spots = [];
  for (const line of [0, 1, -1, 2, -2, 3, -3]) { // a line is 16 units at full size
    const dy = 16 * zoom * line;
    spots.push({ x, y: y + dy, anchor }, { ...flipped, y: y + dy });
  }
  // then further round the tip: either side of it, up to four lines up or down
  for (const line of [0, -1, 1, -2, 2, -3, 3, -4, 4]) {
    const dy = 16 * zoom * line;
    spots.push({ x: tip[0] - 14 * zoom, y: tip[1] + dy + 5 * zoom, anchor: "end" },
      { x: tip[0] + 14 * zoom, y: tip[1] + dy + 5 * zoom, anchor: "start" });
  }
  return [...spots, ...spotsAround(tip[0], tip[1], 18 * zoom, LABEL_FONT * zoom)];
}

/** Draggable handles for the arrow heads. Heads at (nearly) the same point fan out around
 * it (core/fan.js), each a visible knob with its name, so every vector stays reachable (q0 and
 * k0 both start at (1, 0) in the lesson's example). Each is a button for the keyboard: arrows
 * move it. */
function knobsOf(items) {
  const tips = items.map((item) => toPx(item.vec[0], item.vec.length > 1 ? item.vec[1] : 0));
  const offsets = fanOut(tips, 16 * zoom, 24 * zoom); // knobs grow with their names
  return items.map((item, n) => {
    const [dx, dy] = offsets[n];
    const fanned = dx !== 0 || dy !== 0;
    return { x: tips[n][0] + dx, y: tips[n][1] + dy,
      r: (fanned ? KNOB.fanned : KNOB.plain) * zoom + 2 };
  });
}

function placeHandles(plane, items) {
  const tips = items.map((item) => toPx(item.vec[0], item.vec.length > 1 ? item.vec[1] : 0));
  const offsets = fanOut(tips, 16 * zoom, 24 * zoom); // knobs grow with their names
  items.forEach((item, n) => {
    const [x, y] = tips[n];
    const [dx, dy] = offsets[n];
    const fanned = dx !== 0 || dy !== 0;
    const label = `${NAME_OF[item.kind]}${item.index}`;
    const vec = item.vec.map((z) => fmt(z, 2)).join(", ");
    const g = svg("g", {
      cls: fanned ? "handle-group fanned" : "handle-group", tabindex: 0, role: "button",
      "aria-label": `${item.kind} ${label} at (${vec}): drag, or use the arrow keys to move it`,
      "data-kind": item.kind, "data-index": item.index,
      "data-testid": `handle-${item.kind}-${item.index}`,
    });
    // a tether joins a fanned knob to its true tip
    if (fanned) g.append(svg("line", { x1: x, y1: y, x2: x + dx, y2: y + dy, cls: "tether" }));
    g.append(svg("circle", { cx: x + dx, cy: y + dy,
      r: (fanned ? KNOB.fanned : KNOB.plain) * zoom,
      cls: `handle ${item.kind}`, "data-kind": item.kind, "data-index": item.index }));
    if (fanned) {
      const t = svg("text", { x: x + dx, y: y + dy + 4.5 * zoom, cls: "knob-label",
        "text-anchor": "middle" });
      zoomText(t, KNOB_FONT);
      t.textContent = label;
      g.append(t);
    }
    plane.append(g);
  });
}

function renderPlane() {
  const plane = $("#plane");
  const focused = document.activeElement && document.activeElement.closest
    ? document.activeElement.closest("#plane [data-testid^='handle-']") : null;
  const refocus = focused ? focused.dataset.testid : null;
  plane.replaceChildren();
  plane.dataset.range = PLANE.range;
  zoom = textZoom(plane);
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
  // with many tokens only q0's lookup is labelled: q0, each key with q0's weight on it, out0
  // (the other queries, values and outputs are drawn, and named in the tables below)
  const many = Math.max(state.q.length, state.k.length) > MANY;
  const label = (kind, index, vec, text) => {
    if (many && kind !== "key" && index !== selected) return;
    if (many && kind === "value") return;
    const [x2, y2] = toPx(vec[0], vec.length > 1 ? vec[1] : 0);
    const [dx, dy, anchor] = LABEL_OFFSETS[kind];
    labels.push({ spots: labelSpots({ x: x2 + dx, y: y2 + dy, tip: [x2, y2], anchor }), text,
      font: LABEL_FONT * zoom, cls: `label ${kind}`,
      attrs: { "data-testid": `label-${kind}-${index}`, "data-tip": `${x2},${y2}` } });
  };
  // labels are placed in order of importance: queries, keys, outputs, values
  state.q.forEach((q, i) => label("query", i, q, `q${i}`));
  state.k.forEach((k, j) => {
    // with many keys the weight is shorter (2 decimals, no "w="): the ring has little room
    const w = !weights ? "" : many ? ` ${fmt(weights[selected][j], 2)}`
      : ` w=${fmt(weights[selected][j], 3)}`;
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
  placeLabels(plane, labels, { knobs: knobsOf(handles),
    bounds: { x0: 0, y0: 0, x1: PLANE.size, y1: PLANE.size } });
  plane.querySelectorAll("text.label").forEach((t) => zoomText(t, LABEL_FONT));
  placeHandles(plane, handles);
  $("#plane-said").textContent = many
    ? `${state.q.length} queries, ${state.k.length} keys: labelled are q0, q0's weight on each ` +
      "key and out0; every other number is in the tables below."
    : "";
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
      input.dataset.problem =
        `${letter}${index}: “${input.value}” is not a list of numbers (write e.g. 0.5, -1)`;
      showError(name, new ApiError(0, input.dataset.problem));
      return;
    }
    input.classList.remove("bad");
    moved = null;
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

function renderSteps(data, current = true) {
  const t = data.trace;
  const dk = data.d_k;
  const isDefault = Math.abs(t.scale - 1 / Math.sqrt(dk)) < 1e-15;
  const scaleText = isDefault ? `1/√${dk} = ${fmt(t.scale)}` : fmt(t.scale);
  const byKey = ["n_q", "n_k"];
  $("#steps").replaceChildren(
    step("1 · scores = Q Kᵀ", "each query's dot product with each key",
      matrixTable("scores", t.scores, "q", "k", { dims: byKey })),
    step(`2 · scaled = scores × ${scaleText}`,
      "dividing by √d_k keeps softmax out of its hard-argmax regime",
      matrixTable("scaled", t.scaled, "q", "k", { dims: byKey })),
    step(data.exp.shifted.some(Boolean)
      ? "3 · e^(scaled − row max), and each row's sum" : "3 · e^scaled, and each row's sum",
    expNote(data), matrixTable("exp", data.exp.exp, "q", "k",
      { rowSums: data.exp.sum, sumId: "exp-sum", sumDigits: 3, dims: byKey })),
    step("4 · weights = softmax(scaled) = e^scaled / sum",
      "each row sums to 1: a soft, graded lookup", matrixTable("weight", t.weights, "q", "k",
        { heat: true, rowSums: data.row_sums, sumId: "rowsum", sumDigits: 4,
          allowed: t.allowed, dims: byKey })),
    step("5 · output = weights V", outputNote(data),
      matrixTable("output", t.output, "q", "d", { dims: ["n_q", "d_v"] })),
    legend("vectors-legend"),
  );
  renderTask(t);
  renderLibrarian(t);
  if (pendingCheck && t.weights.length === state.q.length) finishCheck(t);
  else if (checkShown) { // the inputs changed since the check: its words no longer apply
    $('[data-testid="check-shape"]').textContent = "";
    $('[data-testid="check-shape"]').classList.remove("done");
    checkShown = false;
  }
  if (!current) return;
  const w = t.weights[0].map((x) => fmt(x, 3)).join(", ");
  announce(`${movedWords()}weights of q0: ${w}; output (${t.output[0].map((x) => fmt(x, 3)).join(", ")})`);
  moved = null; // said once, with the answer to that move: a later answer never repeats it
}

/** Step 3's note: each row's sum; for the lesson's own inputs only, why the lesson prints 4.668. */
function expNote(data) {
  const exp = data.exp;
  if (exp.shifted[0]) {
    return "the scores are too large for e^x, so each row is shifted by its largest score " +
      "first — softmax gives the same weights either way";
  }
  const sum = fmt(exp.sum[0], 3);
  const seed = data.seed;
  if (!seed || fmt(seed.sum, 3) === sum) {
    return `q0's row: ${exp.exp[0].map((x) => fmt(x, 3)).join(" + ")} adds up to Σ = ${sum} ` +
      "(each number shown rounded)";
  }
  return `q0's row adds up to Σ = ${sum} (exactly ${fmt(exp.sum[0], 6)}). These are the ` +
    `lesson's inputs: it adds the rounded values ${seed.exp_rounded.map((x) => fmt(x, 3)).join(" + ")} ` +
    `by hand, which is why it prints ${fmt(seed.sum, 3)}.`;
}

/** Step 5's note; for the lesson's own inputs, why its worked example 2 prints other digits. */
function outputNote(data) {
  const seed = data.seed;
  const said = "each query's blend of the values";
  if (!seed) return said;
  const exact = data.trace.output[0].map((x) => fmt(x, 4)).join(", ");
  const hand = seed.output.map((x) => fmt(x, 3)).join(", ");
  return `${said}. qkv's (${exact}) comes from the exact weights; the lesson's worked example 2 ` +
    `blends the rounded weights (${seed.weights_rounded.map((x) => fmt(x, 3)).join(", ")}) ` +
    `and gets (${hand}).`;
}

// -- the librarian (the lesson's analogy), said from q0's numbers --------------------------------
// The lesson's own words, quoted where the page rests on them (the learner has the lesson, not
// qkv's files).
const LIBRARIAN_QUOTE = "“You compare your query against every book's key and get a relevance " +
  "score for each — high for a close match, low for an unrelated book. Then you don't walk away " +
  "with the keys — you walk away with the actual value: the book's contents.”";
const vecText = (v, digits = 2) => `(${v.map((z) => fmt(z, digits)).join(", ")})`;
const SHELF = 5; // more books than this: the tags and shares are listed in the tables only
const SOFT = 0.05; // a book with at least this share counts as "still contributing"

/** The lesson's library search, one sentence per step, each written from q0's row of the trace:
 * the query is what you look for, the keys are the catalogue tags, the scaled scores are the
 * relevance, the weights the shares, and the output the blend of the values you walk away with. */
function librarian(t) {
  const q = t.q[0];
  const n = t.k.length;
  const w = t.weights[0];
  const s = t.scaled[0];
  const book = (j) => `book ${j}`;
  const Book = (j) => `Book ${j}`;
  const order = w.map((x, j) => j).sort((a, b) => w[b] - w[a] || a - b);
  const [best] = order;
  const lines = [`You arrive with a query, what you are looking for: q0 = ${vecText(q)}.`];
  lines.push(n <= SHELF
    ? `Each book on the shelf has a catalogue tag, its key: ${t.k.map((k, j) => `k${j} = ${vecText(k)}`).join(", ")}.`
    : `Each of the ${n} books on the shelf has a catalogue tag, its key (k0 … k${n - 1} in the tables).`);
  if (n === 1) {
    lines.push(`There is one book: its relevance score is ${fmt(s[0], 3)}, and softmax gives it ` +
      `the whole weight, 1 — whatever you ask, you walk away with its contents, v0 = ` +
      `${vecText(t.v[0])}.`);
    return lines;
  }
  const scoreList = n <= SHELF ? `: ${s.map((x) => fmt(x, 3)).join(", ")}` : "";
  const equal = s.every((x) => x === s[0]);
  if (equal) {
    lines.push(`Comparing your query with each tag (q0 · k_j × ${fmt(t.scale, 3)}) gives every ` +
      `book the same relevance score, ${fmt(s[0], 3)}: no tag matches better than another.`);
    lines.push(`So softmax gives each of the ${n} books the same share, 1/${n} = ${fmt(w[0], 3)}, ` +
      `and you walk away with the plain average of their contents: out0 = ${vecText(t.output[0], 3)}.`);
    return lines;
  }
  lines.push(`Comparing your query with each tag (q0 · k_j × ${fmt(t.scale, 3)}) gives a ` +
    `relevance score per book${scoreList}; ${book(best)}'s tag matches best ` +
    `(${fmt(s[best], 3)}), ${book(order[n - 1])}'s least (${fmt(s[order[n - 1]], 3)}).`);
  const second = order[1];
  const soft = w[second] >= SOFT
    ? `${Book(best)} gets the most, ${fmt(w[best], 3)}, but ${book(second)} still gets ` +
      `${fmt(w[second], 3)}: a soft, graded lookup, not a pick of one book.`
    : `${Book(best)} gets ${fmt(w[best], 3)} and the rest share ${fmt(1 - w[best], 3)}: this ` +
      "lookup is nearly a hard pick of one book.";
  lines.push(`Softmax turns the scores into shares that sum to 1` +
    (n <= SHELF ? ` (${w.map((x) => fmt(x, 3)).join(", ")})` : "") + `. ${soft}`);
  const blend = n <= SHELF ? w.map((x, j) => `${fmt(x, 3)}·v${j}`).join(" + ") + " = "
    : `Σ_j w_j·v_j = `;
  lines.push(`You don't walk away with the tags: you walk away with a blend of the books' ` +
    `contents, the values — out0 = ${blend}${vecText(t.output[0], 3)}.`);
  return lines;
}

function renderLibrarian(t) {
  $("#librarian").replaceChildren(
    el("h3", {}, "The librarian's search, for q0"),
    el("blockquote", { cls: "lesson-quote" }, [
      el("p", {}, LIBRARIAN_QUOTE), el("footer", {}, "— the lesson, “The analogy: a librarian search”")]),
    ...librarian(t).map((line, i) => el("p", { "data-testid": `librarian-${i}` }, line)));
}

// -- the guided task and the check -------------------------------------------------------------
/** "Make k1 win": does k1 get the largest weight of q0's row? Said from the answer's numbers. */
function renderTask(t) {
  const box = $('[data-testid="task-k1"]');
  const w = t.weights[0];
  box.classList.remove("done");
  if (w.length < 2) {
    box.textContent = "There is no k1 yet: add a key.";
    return;
  }
  const best = w.reduce((b, x, j) => (x > w[b] ? j : b), 0);
  const ties = w.filter((x) => x === w[best]).length;
  const s = t.scores[0];
  if (best === 1 && ties === 1) {
    box.classList.add("done");
    const others = w.map((x, j) => [x, j]).filter(([, j]) => j !== 1)
      .map(([x, j]) => `k${j} ${fmt(x, 3)}`).join(", ");
    box.textContent = `✓ k1 wins: its weight ${fmt(w[1], 3)} is the largest in q0's row ` +
      `(${others}), because its score q0 · k1 = ${fmt(s[1], 3)} is the largest.`;
  } else {
    const rival = best === 1 ? w.findIndex((x, j) => j !== 1 && x === w[1]) : best;
    box.textContent = `Not yet: k1 has weight ${fmt(w[1], 3)}, k${rival} has ` +
      `${fmt(w[rival], 3)}. k1's score q0 · k1 = ${fmt(s[1], 3)} must beat q0 · k${rival} = ` +
      `${fmt(s[rival], 3)}: point k1 more along q0, or make it longer.`;
  }
}

let pendingCheck = null; // the learner's answer, waiting for qkv's 10 × 10 weights
let checkShown = false; // the check's verdict is on screen (until the inputs change)
const CHECK_TOKENS = 10;

/** "Check yourself" 1: read the answer, build 10 tokens, and let qkv's weights decide. */
function checkShape() {
  const text = $("#check-shape-answer").value;
  const box = $('[data-testid="check-shape"]');
  const found = text.match(/^\s*(\d+)\s*(?:×|x|X|\*|,|by)\s*(\d+)\s*$/);
  box.classList.remove("done");
  if (!found) {
    box.textContent = `“${text}” is not a shape: write rows × columns, e.g. 3 × 5.`;
    return;
  }
  pendingCheck = [Number(found[1]), Number(found[2])];
  moved = null; // the 10 tokens replace every vector: an earlier move's words no longer hold
  // 10 tokens around a circle: token i's key at radius 2, its query at radius 1 on the same
  // ray, its value at radius 1.5 half a step round — three rings, so no two heads coincide
  const ring = (radius, turn) => Array.from({ length: CHECK_TOKENS }, (_, i) => {
    const a = (2 * Math.PI * (i + turn)) / CHECK_TOKENS;
    return [Math.round(radius * Math.cos(a) * 100) / 100, Math.round(radius * Math.sin(a) * 100) / 100];
  });
  Object.assign(state, { q: ring(1, 0), k: ring(2, 0), v: ring(1.5, 0.5), scale: "" });
  $("#scale-input").value = "";
  box.textContent = "building 10 tokens…";
  changed();
}

function finishCheck(t) {
  const [rows, cols] = [t.weights.length, t.weights[0].length];
  const [r, c] = pendingCheck;
  pendingCheck = null;
  checkShown = true;
  const box = $('[data-testid="check-shape"]');
  const right = r === rows && c === cols;
  box.classList.toggle("done", right);
  box.textContent = `qkv's weights for these ${state.q.length} tokens are ${rows} × ${cols}: ` +
    `one row per query (${rows}) and one column per key (${cols}), each row summing to 1. ` +
    (right ? `Your ${r} × ${c} is right.` : `Your ${r} × ${c} is not: the weight matrix is ` +
      "n × n for n tokens attending to each other.");
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

/** A new unit vector (dims 0 and 1; the rest 0) at the angle of 24 around the circle that is
 * farthest from every arrow head already on the plane, so added vectors never pile up. */
function freeVector(d) {
  const heads = [...state.q, ...state.k, ...state.v].map((u) => [u[0], u.length > 1 ? u[1] : 0]);
  let best = null;
  for (let a = 0; a < 24; a += 1) {
    const angle = (2 * Math.PI * a) / 24;
    const p = [Math.round(Math.cos(angle) * 100) / 100, Math.round(Math.sin(angle) * 100) / 100];
    const gap = Math.min(Infinity, ...heads.map((h) => Math.hypot(h[0] - p[0], h[1] - p[1])));
    if (!best || gap > best.gap + 1e-9) best = { p, gap };
  }
  return Array.from({ length: d }, (_, i) => (i < 2 && d > 1 ? best.p[i] : i === 0 ? best.p[0] : 0));
}

export function mount(section) {
  root = section;
  const plane = $("#plane");
  plane.addEventListener("pointerdown", (event) => {
    const handle = event.target.closest(".handle-group");
    if (!handle) return;
    moved = null;
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
    moved = { kind, index };
    announce(movedWords());
  });
  $("#add-query").addEventListener("click", () => {
    state.q.push(freeVector(state.q[0].length));
    changed();
  });
  $("#add-key").addEventListener("click", () => {
    state.k.push(freeVector(state.k[0].length));
    state.v.push(freeVector(state.v[0].length));
    changed();
  });
  $("#check-shape-run").addEventListener("click", checkShape);
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

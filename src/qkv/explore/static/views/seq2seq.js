// View 7 · Encoder–decoder: the lesson's motivating story. The shipped seq2seq models (one with
// cross-attention, one with a fixed context vector) reverse a typed input; their outputs and
// weights over the input positions come from the server (POST /api/seq2seq).
import { Channel } from "../core/api.js";
import { announce, el, fmt, scrollBox, svg } from "../core/dom.js";
import { lineChart, PALETTE } from "../core/chart.js";
import { heat, legend } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";

export const name = "seq2seq";
export const READS = {
  "/api/seq2seq": ["input", "expected", "trained_lengths", "attention.output",
    "attention.weights", "attention.correct", "attention.length", "fixed.output",
    "fixed.correct", "fixed.length"],
  "/api/seq2seq/curves": ["per_bucket", "run", "trained_lengths", "d_hidden", "long_example",
    "models.attention.lengths", "models.attention.token_accuracy",
    "models.attention.exact_match", "models.fixed.lengths", "models.fixed.token_accuracy",
    "models.fixed.exact_match"],
};

// the controls by the request fields they fill, so a server's complaint names the control
export const LABELS = { input: "input" };

let root;
const $ = (sel) => root.querySelector(sel);

const channel = new Channel(name, "/api/seq2seq", render);
const curvesChannel = new Channel(name, "/api/seq2seq/curves", renderCurves);
let curves = null; // the held-out accuracy by length (asked once)
let shown = null; // the last decoded answer, to mark its length on the curves

export function show() {
  $("#seq2seq-input").value = state.s2s;
  channel.send({ input: state.s2s });
  if (!curves) curvesChannel.send({});
}

/** Decoder steps down, encoder positions across: one model's weights over the input. The cells
 * fit the view's width when they can (12 to 22 px); a longer input scrolls sideways inside a
 * labelled region the keyboard reaches, with the decoder steps' labels pinned on its left. */
function crossMap(kind, r, input) {
  const n = r.weights.length;
  const m = 24;
  const room = Math.min(root.clientWidth || 640, 700) - m - 12;
  const cell = Math.max(12, Math.min(22, Math.floor(room / Math.max(n, 1))));
  const height = m + n * cell + 4;
  const rows = svg("svg", { width: m, height, cls: "heatmap pinned-rows", "aria-hidden": "true" });
  const map = svg("svg", { width: n * cell + 4, height, cls: "heatmap",
    "data-testid": `${kind}-map`, role: "img",
    "aria-label": `${kind}: decoder steps down, encoder positions across` });
  r.weights.forEach((row, t) => row.forEach((w, j) => {
    const rect = svg("rect", { x: j * cell, y: m + t * cell, width: cell, height: cell,
      cls: "hcell", "data-testid": `${kind}-w-${t}-${j}`, "data-value": w });
    rect.style.fill = heat(w);
    const tip = svg("title");
    tip.textContent = `output step ${t} (“${r.output[t]}”) reads input ${j} (“${input[j]}”): ${fmt(w)}`;
    rect.append(tip);
    map.append(rect);
  }));
  [...input].forEach((c, j) => {
    const tx = svg("text", { x: j * cell + cell / 2, y: m - 6, "text-anchor": "middle", cls: "tok-label" });
    tx.textContent = c;
    map.append(tx);
  });
  [...r.output].forEach((c, t) => {
    const tx = svg("text", { x: m - 6, y: m + t * cell + cell * 0.75, "text-anchor": "end", cls: "tok-label" });
    tx.textContent = c;
    rows.append(tx);
  });
  return el("div", { cls: "pinned-map" }, [rows,
    scrollBox([map], `${kind} weights: ${n} decoder steps × ${input.length} input positions` +
      (n * cell + 4 > room + m ? ", scroll sideways for the rest" : ""))]);
}

function render(data) {
  const side = (kind, title) => {
    const r = data[kind];
    const letters = [...r.output].map((c, t) => el("span", {
      cls: c === data.expected[t] ? "ok" : "bad" }, c));
    return el("div", { cls: "step" }, [
      el("h4", {}, title),
      el("p", {}, ["output: ", el("code", { "data-testid": `${kind}-output` }, letters),
        ` — ${r.correct} of ${r.length} right`]),
      crossMap(kind, r, data.input),
      legend("seq2seq-legend"),
    ]);
  };
  $("#seq2seq-result").replaceChildren(
    el("p", {}, ["task: reverse the input. expected ", el("code", { "data-testid": "seq2seq-expected" },
      data.expected), ` (both models were trained on inputs of ${data.trained_lengths[0]} to ` +
      `${data.trained_lengths[1]} symbols, a…p)`]),
    el("div", { cls: "steps" }, [
      side("attention", "attention: cross-attention weights (decoder steps × encoder positions)"),
      fixedSide(data),
    ]));
  shown = data;
  renderTask(data);
  if (curves) renderCurves(curves);
  announce(`attention model: ${data.attention.correct} of ${data.attention.length} right; ` +
    `fixed context: ${data.fixed.correct} of ${data.fixed.length}`);
}

const SHORT = 12; // the task: an input of at most this many symbols

/** "Find a short input attention reverses perfectly and the fixed context vector gets wrong",
 * from both models' counts of right symbols. */
function renderTask(data) {
  const box = $('[data-testid="task-s2s"]');
  const a = data.attention, f = data.fixed;
  const n = data.input.length;
  const said = `on “${data.input}” (${n} symbol${n === 1 ? "" : "s"}) attention gets ` +
    `${a.correct} of ${a.length} right, the fixed context vector ${f.correct} of ${f.length}`;
  const short = n <= SHORT;
  const done = short && a.correct === a.length && f.correct < f.length;
  box.classList.toggle("done", done);
  if (done) {
    box.textContent = `✓ ${said[0].toUpperCase()}${said.slice(1)}: with only ${n} symbols the ` +
      `one vector already loses ${f.length - f.correct}, while attention reads each position.`;
    return;
  }
  const why = [];
  if (!short) why.push(`it is longer than ${SHORT} symbols`);
  if (a.correct < a.length) why.push("attention is not perfect on it");
  if (f.correct === f.length) why.push("the fixed context vector gets it all right");
  box.textContent = `Not yet: ${said} — ${why.join(", and ")}.`;
}

/** The fixed model has no weights over the input: every output step reads the same vector hn
 * (the encoder's last states). Drawn as the input flowing into one box — not as a heat map. */
function fixedSide(data) {
  const r = data.fixed;
  const letters = [...r.output].map((c, t) => el("span", {
    cls: c === data.expected[t] ? "ok" : "bad" }, c));
  const dh = curves ? `${curves.d_hidden} numbers` : "one vector";
  return el("div", { cls: "step", "data-testid": "fixed-side" }, [
    el("h4", {}, "fixed context vector: no attention weights"),
    el("p", {}, ["output: ", el("code", { "data-testid": "fixed-output" }, letters),
      ` — ${r.correct} of ${r.length} right`]),
    contextDiagram(data.input, r.output.length, dh),
    el("p", { cls: "note", "data-testid": "fixed-caption" }, `The decoder never looks at the ` +
      `input positions: all ${data.input.length} symbols are squeezed into hn (${dh}), the ` +
      `encoder's state after reading the input from both ends, and every output step reads that ` +
      `same vector.`),
  ]);
}

function contextDiagram(input, nOut, dh) {
  const n = input.length;
  // drawn 1:1 (its text stays at its CSS size): the letters' pitch fits the view's width when
  // it can (8 to 14 px), else the diagram scrolls sideways in its labelled region
  const room = Math.min(root.clientWidth || 640, 700) - 40;
  const cell = Math.max(8, Math.min(14, Math.floor(room / Math.max(n, 1))));
  const W = Math.max(240, 24 + n * cell + 8);
  const H = 128;
  const boxW = 180;
  const map = svg("svg", { viewBox: `0 0 ${W} ${H}`, width: W, height: H, cls: "context-diagram",
    "data-testid": "fixed-context", role: "img", "aria-label": `fixed model: all ${n} input ` +
      `symbols pass through the encoder into one vector (${dh}); every output step reads it` });
  [...input].forEach((c, j) => {
    const x = 24 + j * cell + cell / 2;
    const tx = svg("text", { x, y: 14, "text-anchor": "middle", cls: "tok-label" });
    tx.textContent = c;
    map.append(tx, svg("line", { x1: x, y1: 20, x2: W / 2, y2: 70, cls: "context-flow" }));
  });
  map.append(svg("rect", { x: (W - boxW) / 2, y: 70, width: boxW, height: 28, rx: 4,
    cls: "context-box" }));
  const label = svg("text", { x: W / 2, y: 89, "text-anchor": "middle", cls: "chart-text" });
  label.textContent = `hn: ${dh}`;
  const out = svg("text", { x: W / 2, y: 120, "text-anchor": "middle", cls: "chart-text" });
  out.textContent = `read by each of the ${nOut} output steps`;
  map.append(label, out);
  return scrollBox([map], `the fixed context vector: ${n} input symbols into one vector`);
}

/** Accuracy by input length of both models on the held-out set, the current input marked. */
function renderCurves(c) {
  const first = curves === null;
  curves = c;
  const fixed = $("[data-testid=fixed-side]");
  if (first && shown && fixed) fixed.replaceWith(fixedSide(shown)); // now with hn's size
  const kinds = [["attention", "attention"], ["fixed", "fixed context vector"]];
  const mid = (b) => (b.lengths[0] + b.lengths[1]) / 2;
  const marks = shown ? [{ x: shown.input.length, label: `this input: ${shown.input.length}` }] : [];
  const chart = lineChart({ testid: "seq2seq-curve", label: `token accuracy by input length, ` +
      `both models, ${c.per_bucket.toLocaleString("en-US")} held-out inputs per length bucket`,
    x: { label: "input length (symbols)", domain: [0, c.trained_lengths[1] + 4],
      ticks: [0, ...c.models.attention.map((b) => b.lengths[1])], format: String },
    y: { label: "token accuracy", domain: [0, 1], ticks: [0, 0.25, 0.5, 0.75, 1],
      format: (v) => fmt(v, 2) },
    marks,
    series: kinds.map(([kind, label], k) => ({ name: label, color: PALETTE[k],
      points: c.models[kind].map((b) => ({ x: mid(b), y: b.token_accuracy,
        title: `${label}, lengths ${b.lengths[0]}–${b.lengths[1]}: ${fmt(b.token_accuracy, 3)} ` +
          `of the symbols, ${fmt(b.exact_match, 3)} of the inputs exactly` })) })) });
  const table = scrollBox([el("table", { cls: "matrix",
    "data-testid": "seq2seq-curve-table" }, [
    el("caption", {}, `2 models × ${c.models.attention.length} length buckets: token accuracy ` +
      "(exact match)"),
    el("tr", {}, [el("th", {}, "model"), ...c.models.attention.map((b) =>
      el("th", {}, `${b.lengths[0]}–${b.lengths[1]}`))]),
    ...kinds.map(([kind, label]) => el("tr", {}, [el("th", {}, label),
      ...c.models[kind].map((b, i) => el("td", { "data-testid": `s2s-acc-${kind}-${i}`,
        "data-value": b.token_accuracy }, `${fmt(b.token_accuracy, 3)} (${fmt(b.exact_match, 3)})`))]))])],
    "held-out accuracy by input length");
  const firstB = (kind) => c.models[kind][0];
  const lastB = (kind) => c.models[kind][c.models[kind].length - 1];
  const drop = (kind) => firstB(kind).token_accuracy - lastB(kind).token_accuracy;
  const words = `On ${c.per_bucket.toLocaleString("en-US")} held-out inputs per bucket (${c.run}): from ${firstB("fixed").lengths[0]}–` +
    `${firstB("fixed").lengths[1]} to ${lastB("fixed").lengths[0]}–${lastB("fixed").lengths[1]} ` +
    `symbols the fixed context vector's token accuracy goes from ` +
    `${fmt(firstB("fixed").token_accuracy, 3)} to ${fmt(lastB("fixed").token_accuracy, 3)} ` +
    `(${drop("fixed") >= 0 ? "down" : "up"} ${fmt(Math.abs(drop("fixed")), 3)}), attention's from ` +
    `${fmt(firstB("attention").token_accuracy, 3)} to ${fmt(lastB("attention").token_accuracy, 3)} ` +
    `(${drop("attention") >= 0 ? "down" : "up"} ${fmt(Math.abs(drop("attention")), 3)}).`;
  $("#seq2seq-curves").replaceChildren(
    el("h4", {}, "Accuracy by input length, held-out inputs"), chart, table,
    el("p", { "data-testid": "seq2seq-curve-words" }, words));
}

export function mount(section) {
  root = section;
  $("#seq2seq-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.s2s = $("#seq2seq-input").value.trim();
    writeURL();
    show();
  });
  const pick = (text) => { state.s2s = text; writeURL(); show(); };
  // the held-out long input once the curves are in; until then the default is the same text
  $("#seq2seq-long").addEventListener("click", () =>
    pick(curves ? curves.long_example : "lohbhilialgfipfialpgnjdhnaimmomkbpdgnbfd"));
  $("#seq2seq-short").addEventListener("click", () =>
    pick((curves ? curves.long_example : "lohbhilialgfipfialpgnjdhnaimmomkbpdgnbfd").slice(0, 8)));
}

export function sync() {}

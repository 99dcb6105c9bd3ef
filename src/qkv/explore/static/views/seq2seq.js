// View 7 · Encoder–decoder: the seeds' motivating story. The shipped seq2seq models (one with
// cross-attention, one with a fixed context vector) reverse a typed input; their outputs and
// weights over the input positions come from the server (POST /api/seq2seq).
import { Channel } from "../core/api.js";
import { announce, el, fmt, svg } from "../core/dom.js";
import { heat, legend } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";

export const name = "seq2seq";
export const READS = {
  "/api/seq2seq": ["input", "expected", "trained_lengths", "attention.output",
    "attention.weights", "attention.correct", "attention.length", "fixed.output",
    "fixed.weights", "fixed.correct", "fixed.length"],
};

let root;
const $ = (sel) => root.querySelector(sel);

const channel = new Channel(name, "/api/seq2seq", render);

export function show() {
  $("#seq2seq-input").value = state.s2s;
  channel.send({ input: state.s2s });
}

/** Decoder steps down, encoder positions across: one model's weights over the input. */
function crossMap(kind, r, input) {
  const n = r.weights.length;
  const cell = Math.max(8, Math.min(22, Math.floor(440 / n)));
  const m = 24;
  const map = svg("svg", { width: m + n * cell + 4, height: m + n * cell + 4, cls: "heatmap",
    "data-testid": `${kind}-map`, role: "img",
    "aria-label": `${kind}: decoder steps down, encoder positions across` });
  r.weights.forEach((row, t) => row.forEach((w, j) => {
    const rect = svg("rect", { x: m + j * cell, y: m + t * cell, width: cell, height: cell,
      cls: "hcell", "data-testid": `${kind}-w-${t}-${j}`, "data-value": w });
    rect.style.fill = heat(w);
    const tip = svg("title");
    tip.textContent = `output step ${t} (“${r.output[t]}”) reads input ${j} (“${input[j]}”): ${fmt(w)}`;
    rect.append(tip);
    map.append(rect);
  }));
  [...input].forEach((c, j) => {
    const tx = svg("text", { x: m + j * cell + cell / 2, y: m - 6, "text-anchor": "middle", cls: "tok-label" });
    tx.textContent = c;
    map.append(tx);
  });
  [...r.output].forEach((c, t) => {
    const tx = svg("text", { x: m - 6, y: m + t * cell + cell * 0.75, "text-anchor": "end", cls: "tok-label" });
    tx.textContent = c;
    map.append(tx);
  });
  return map;
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
    ]);
  };
  $("#seq2seq-result").replaceChildren(
    el("p", {}, ["task: reverse the input. expected ", el("code", { "data-testid": "seq2seq-expected" },
      data.expected), ` (both models were trained on inputs of ${data.trained_lengths[0]} to ` +
      `${data.trained_lengths[1]} symbols, a…p)`]),
    el("div", { cls: "steps" }, [
      side("attention", "attention: cross-attention weights (decoder steps × encoder positions)"),
      side("fixed", "fixed context vector: the decoder sees only the last encoder state"),
    ]), legend("seq2seq-legend"));
  announce(`attention model: ${data.attention.correct} of ${data.attention.length} right; ` +
    `fixed context: ${data.fixed.correct} of ${data.fixed.length}`);
}

export function mount(section) {
  root = section;
  $("#seq2seq-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.s2s = $("#seq2seq-input").value.trim();
    writeURL();
    show();
  });
}

export function sync() {}

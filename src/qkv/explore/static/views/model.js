// View 9 · A real model: MiniLM (or any model the server was started with) running on qkv.
// Every layer's and head's weights as thumbnails, one head as a heat map, and the neuron view
// of one token: qkv.explain of that head's q, k, v (POST /api/model/attentions, /neuron).
import { Channel } from "../core/api.js";
import { announce, el, fmt, scrollBox, svg } from "../core/dom.js";
import { COLORS, heat, heatRGB, legend, maskedRGB } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";

export const name = "model";
export const READS = {
  "/api/model/attentions": ["tokens", "layers", "heads", "weights", "allowed", "model",
    "special"],
  "/api/model/neuron": ["tokens", "token", "layer", "head", "kv_head", "products", "trace.q",
    "trace.k", "trace.v", "trace.scores", "trace.scaled", "trace.weights", "trace.allowed",
    "trace.output", "trace.scale"],
};

let root;
const $ = (sel) => root.querySelector(sel);
const $$ = (sel, within = root) => Array.from(within.querySelectorAll(sel));

let model = null; // the last /api/model/attentions answer, with the sentence it belongs to
const channel = new Channel(name, "/api/model/attentions", (data, body) => {
  model = { ...data, sentence: body.sentence };
  state.layer = Math.min(state.layer, data.layers - 1);
  state.head = Math.min(state.head, data.heads - 1);
  if (state.token !== null && state.token >= data.tokens.length) state.token = null;
  $("#model-status").textContent = `${data.tokens.length} tokens`;
  $("#model-name").textContent = `${data.model}, ${data.layers} layers × ${data.heads} heads,`;
  writeURL();
  renderThumbs();
  renderHeat();
  loadNeuron();
}, () => {
  $("#model-status").textContent = "not computed: see the message above";
});
const neuronChannel = new Channel(name, "/api/model/neuron", renderNeuron);

export function show() {
  $("#sentence").value = state.sentence;
  if (model && model.sentence === state.sentence) { // drawn again: the layer, head or token
    state.layer = Math.min(state.layer, model.layers - 1); // may come from a new URL
    state.head = Math.min(state.head, model.heads - 1);
    if (state.token !== null && state.token >= model.tokens.length) state.token = null;
    renderThumbs();
    renderHeat();
    loadNeuron();
    return;
  }
  $("#model-status").textContent = "computing (the first time also loads the model)…";
  channel.send({ sentence: state.sentence });
}

function loadNeuron() {
  if (state.token === null || !model) {
    $("#neuron").replaceChildren(el("p", { cls: "note" },
      "Click a token on the left of the heat map for the neuron view."));
    return;
  }
  neuronChannel.send({ sentence: state.sentence, layer: state.layer, head: state.head,
    token: state.token });
}

/** May query i attend to key j in layer l, head h? (A causal model's future keys may not.) */
const allowedAt = (l, h, i, j) => !model.allowed || model.allowed[l][h][i][j];

function drawMap(canvas, matrix, allowed) {
  const n = matrix.length;
  const masked = maskedRGB();
  canvas.width = n;
  canvas.height = n;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(n, n);
  matrix.forEach((row, i) => row.forEach((w, j) => {
    // the one linear scale, as qkv look / qkv.show; masked pairs grey, never "weight 0"
    const rgb = allowed && !allowed[i][j] ? masked : heatRGB(w);
    const o = 4 * (i * n + j);
    image.data[o] = rgb[0];
    image.data[o + 1] = rgb[1];
    image.data[o + 2] = rgb[2];
    image.data[o + 3] = 255;
  }));
  ctx.putImageData(image, 0, 0);
}

function renderThumbs() {
  const box = $("#thumbs");
  box.replaceChildren();
  box.style.setProperty("--heads", model.heads);
  box.append(el("div", { cls: "thumb-label" }, ""));
  for (let h = 0; h < model.heads; h += 1) box.append(el("div", { cls: "thumb-label" }, `h${h}`));
  for (let l = 0; l < model.layers; l += 1) {
    box.append(el("div", { cls: "thumb-label" }, `L${l}`));
    for (let h = 0; h < model.heads; h += 1) {
      const picked = l === state.layer && h === state.head;
      const canvas = el("canvas", {
        cls: picked ? "thumb selected" : "thumb", tabindex: 0, role: "button",
        "aria-pressed": String(picked), "aria-label": `layer ${l}, head ${h}`,
        "data-testid": `thumb-${l}-${h}`, title: `layer ${l}, head ${h}`,
      });
      drawMap(canvas, model.weights[l][h], model.allowed && model.allowed[l][h]);
      const pick = () => {
        state.layer = l;
        state.head = h;
        writeURL();
        // only the selection moves: every thumbnail still shows its head's weights (drawing
        // them all again cost each click a canvas per head), and the one picked keeps the focus
        $$("canvas.thumb").forEach((thumb) => {
          const on = thumb === canvas;
          thumb.classList.toggle("selected", on);
          thumb.setAttribute("aria-pressed", String(on));
        });
        renderHeat();
        loadNeuron();
        announce(`layer ${l}, head ${h} shown`);
      };
      canvas.addEventListener("click", pick);
      canvas.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          pick();
        }
      });
      box.append(canvas);
    }
  }
}

const LABEL_GLYPH = 7.4; // px a character of .tok-label (12 px monospace) takes, with room
const MIN_CELL = 13; // a row no lower than its label (12 px): labels never overlap

/** The width the heat map may take: beside the thumbnails when there is room there, else
 * the whole row below them. Measured on the columns' box, whose width does not depend on
 * the map: the map's own box is only as wide as what it holds, so a first visit measured an
 * empty box and drew the map 198 px wide, a click on a thumbnail 458. */
function heatRoom() {
  const full = root.querySelector(".model-cols").clientWidth;
  const beside = full - $("#thumbs").offsetWidth - 24; // .model-cols' gap
  return beside >= 320 ? beside : full;
}

function renderHeat() {
  const tokens = model.tokens;
  const n = tokens.length;
  const weights = model.weights[state.layer][state.head];
  // room for the labels: each row's token to the left, each column's rotated −60° above and
  // reaching right past its column by half its length (the last, [SEP], was cut off)
  const longest = Math.max(...tokens.map((t) => t.length));
  const margin = Math.max(60, Math.ceil(longest * LABEL_GLYPH + 10));
  const right = Math.ceil(longest * LABEL_GLYPH * 0.5) + 4;
  // cells fit the room when they can (a phone's 370 px), never below a label's height (the
  // rows' labels would overlap): then the box scrolls sideways
  const room = Math.min(560 + margin, heatRoom()) - margin - right;
  const cell = Math.max(MIN_CELL, Math.min(28, Math.floor(room / n)));
  const size = margin + n * cell;
  $("#heat-title").textContent = `layer ${state.layer}, head ${state.head}: ` +
    `${n} × ${n} weights, row = query token, column = key token`;
  const map = svg("svg", { viewBox: `0 0 ${size + right} ${size + 4}`, width: size + right,
    height: size + 4, cls: "heatmap", role: "group",
    "aria-label": `heat map of layer ${state.layer}, head ${state.head}: Tab to a row's token; ` +
      "its weights are read out; Enter opens its neuron view" });
  $("#hover-info").textContent = "\u00a0"; // no stale text from a previous sentence
  const highlight = svg("g", { cls: "highlight" });
  const rowBand = svg("rect", { x: margin, width: n * cell, height: cell, cls: "band",
    visibility: "hidden", "data-testid": "highlight-row" });
  const colBand = svg("rect", { y: margin, width: cell, height: n * cell, cls: "band",
    visibility: "hidden", "data-testid": "highlight-col" });
  highlight.append(rowBand, colBand);
  const showPair = (i, j) => {
    rowBand.setAttribute("y", margin + i * cell);
    colBand.setAttribute("x", margin + j * cell);
    rowBand.setAttribute("visibility", "visible");
    colBand.setAttribute("visibility", "visible");
    rowBand.dataset.index = i;
    colBand.dataset.index = j;
    $$(".tok-label", map).forEach((t) => t.classList.toggle("hot",
      Number(t.dataset.index) === (t.dataset.axis === "row" ? i : j)));
    $("#hover-info").textContent = `“${tokens[i]}” → “${tokens[j]}”: ` +
      (allowedAt(state.layer, state.head, i, j) ? `weight ${fmt(weights[i][j])}`
        : "masked (may not attend)");
    $("#hover-info").dataset.value = weights[i][j];
  };
  weights.forEach((row, i) => row.forEach((w, j) => {
    const ok = allowedAt(state.layer, state.head, i, j);
    const rect = svg("rect", { x: margin + j * cell, y: margin + i * cell, width: cell,
      height: cell, cls: ok ? "hcell" : "hcell masked", "data-testid": `heat-cell-${i}-${j}`,
      "data-value": w, "data-allowed": ok ? "1" : "0" });
    rect.style.fill = ok ? heat(w) : COLORS.masked;
    const tip = svg("title");
    tip.textContent = `“${tokens[i]}” → “${tokens[j]}”: ${ok ? fmt(w) : "masked"}`;
    rect.append(tip);
    rect.addEventListener("mouseenter", () => showPair(i, j));
    rect.addEventListener("click", () => pickToken(i));
    map.append(rect);
    if (!ok && cell >= 10) { // the mark, so "masked" never reads as "weight 0"
      const mark = svg("text", { x: margin + j * cell + cell / 2, y: margin + i * cell + cell * 0.72,
        cls: "mask-mark", "text-anchor": "middle", "aria-hidden": "true" });
      mark.textContent = COLORS.masked_mark;
      map.append(mark);
    }
  }));
  tokens.forEach((tok, i) => {
    const top = weights[i].map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 3)
      .map(([w, j]) => `“${tokens[j]}” ${fmt(w, 2)}`).join(", ");
    const rowLabel = svg("text", { x: margin - 4, y: margin + i * cell + cell * 0.7,
      cls: "tok-label row", "text-anchor": "end", "data-axis": "row", "data-index": i,
      "data-testid": `heat-row-${i}`, tabindex: 0, role: "button",
      "aria-label": `row ${i}, “${tok}” attends most to ${top}. Enter: neuron view` });
    rowLabel.textContent = tok;
    rowLabel.addEventListener("mouseenter", () => showPair(i, i));
    rowLabel.addEventListener("focus", () => showPair(i, weights[i].indexOf(Math.max(...weights[i]))));
    rowLabel.addEventListener("click", () => pickToken(i));
    rowLabel.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        pickToken(i);
      }
    });
    const x = margin + i * cell + cell * 0.6;
    const colLabel = svg("text", { x, y: margin - 4, cls: "tok-label col",
      transform: `rotate(-60 ${x} ${margin - 4})`, "data-axis": "col", "data-index": i,
      "data-testid": `heat-col-${i}` });
    colLabel.textContent = tok;
    colLabel.addEventListener("mouseenter", () => showPair(i, i));
    map.append(rowLabel, colLabel);
  });
  map.append(highlight);
  $("#heat").replaceChildren(map);
  $("#heat-legend").replaceChildren(legend("heat-legend-bar"));
  renderTask();
}

const MOST = 0.5; // the task: more than half the text's tokens look most at the one before
const FEWEST = 2; // ... of at least this many: one token cannot show a habit

/** "1 token", "3 tokens". */
const count = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

/** "Find a previous-token head", from the open head's weights. Only the text's own tokens
 * count: a query i whose token and whose previous token (i − 1) both come from the sentence,
 * not the [CLS] / [SEP] the tokenizer adds. A sentence with fewer than FEWEST such queries
 * (three tokens of its own in a row) cannot show a previous-token head, whatever its weights. */
function renderTask() {
  const box = $('[data-testid="task-previous"]');
  const weights = model.weights[state.layer][state.head];
  const n = weights.length;
  const special = model.special && model.special.length === n ? model.special
    : Array(n).fill(false);
  const where = `layer ${state.layer}, head ${state.head}`;
  box.classList.remove("done");
  const words = special.filter((x) => !x).length;
  const queries = [];
  for (let i = 1; i < n; i += 1) if (!special[i] && !special[i - 1]) queries.push(i);
  if (queries.length < FEWEST) {
    box.textContent = `Type a longer sentence, three words or more: this one has ` +
      `${count(words, "token")} of its own` + (words < n ? " besides the " +
        `${count(n - words, "marker")} the tokenizer adds` : "") +
      `, so ${queries.length === 0 ? "no token has" : "only 1 token has"} a token of the ` +
      "sentence just before it.";
    return;
  }
  let hits = 0;
  for (const i of queries) {
    const row = weights[i];
    if (row.indexOf(Math.max(...row)) === i - 1) hits += 1;
  }
  const total = queries.length;
  const said = `${hits} of ${count(total, "token")} (each after another token of the sentence) ` +
    `${total === 1 ? "attends" : "attend"} most to the token before`;
  if (hits / total > MOST) {
    box.classList.add("done");
    box.textContent = `✓ In ${where}, ${said}: a previous-token head.`;
  } else {
    box.textContent = `Not yet: in ${where}, ${said}; more than half must.`;
  }
}

function pickToken(i) {
  state.token = i;
  writeURL();
  loadNeuron();
}

/** A vector as a strip of coloured cells (blue positive, red negative). */
function strip(vector, maxAbs, testid) {
  const box = el("div", { cls: "strip", "data-testid": testid, role: "img",
    "aria-label": `${vector.length} numbers from ${fmt(Math.min(...vector), 2)} to ${fmt(Math.max(...vector), 2)}` });
  box.dataset.values = JSON.stringify(vector);
  vector.forEach((x, d) => {
    const c = el("span", { cls: "dim", title: `dim ${d}: ${fmt(x)}` });
    const a = Math.min(1, Math.abs(x) / (maxAbs || 1)).toFixed(3);
    c.style.background = x >= 0 ? `rgba(31, 119, 180, ${a})` : `rgba(214, 39, 40, ${a})`;
    box.append(c);
  });
  return box;
}

function renderNeuron(data) {
  const t = data.trace;
  const tokens = data.tokens;
  const q = t.q[0];
  const maxAbs = Math.max(...q.map(Math.abs), ...t.k.flat().map(Math.abs));
  const maxProd = Math.max(...data.products.flat().map(Math.abs));
  const table = el("table", { cls: "neuron" }, [el("tr", {}, [
    el("th", {}, "key token"), el("th", {}, `k_j (${q.length} dims)`), el("th", {}, "q ∘ k_j"),
    el("th", {}, "q · k_j"), el("th", {}, `× ${fmt(t.scale)}`), el("th", {}, "weight"),
    el("th", {}, "v_j"),
  ])]);
  const maxV = Math.max(...t.v.flat().map(Math.abs), ...t.output[0].map(Math.abs));
  tokens.forEach((tok, j) => {
    const w = t.weights[0][j];
    const ok = !t.allowed || t.allowed[0][j];
    const bar = el("div", { cls: "bar" });
    bar.style.width = `${(100 * w).toFixed(2)}%`;
    table.append(el("tr", {}, [
      el("th", { cls: "tok" }, tok),
      el("td", {}, strip(t.k[j], maxAbs, `neuron-k-${j}`)),
      el("td", {}, strip(data.products[j], maxProd, `neuron-prod-${j}`)),
      el("td", { "data-testid": `neuron-score-${j}`, "data-value": t.scores[0][j] },
        fmt(t.scores[0][j], 3)),
      el("td", { "data-testid": `neuron-scaled-${j}`, "data-value": t.scaled[0][j] },
        ok ? fmt(t.scaled[0][j], 3) : COLORS.masked_mark),
      el("td", { cls: "wcell" }, [el("div", { cls: "bar-track" }, [bar]),
        el("span", { "data-testid": `neuron-weight-${j}`, "data-value": w,
          "data-allowed": ok ? "1" : "0" }, ok ? fmt(w) : `${COLORS.masked_mark} masked`)]),
      el("td", {}, strip(t.v[j], maxV, `neuron-v-${j}`)),
    ]));
  });
  table.append(el("tr", { cls: "out-row" }, [
    el("th", { cls: "tok" }, "output"), el("td", { colspan: 5, cls: "note" },
      "Σ_j weight_j · v_j: the head's output for this token"),
    el("td", {}, strip(t.output[0], maxV, "neuron-output")),
  ]));
  announce(`neuron view of “${tokens[data.token]}”: largest weight ` +
    `${fmt(Math.max(...t.weights[0]), 3)}`);
  $("#neuron").replaceChildren(
    el("h3", { "data-testid": "neuron-title" },
      `neuron view: “${tokens[data.token]}” (token ${data.token}) in layer ${data.layer}, ` +
      `head ${data.head} — ` + (data.kv_head === data.head
        ? "qkv.explain(q[h, [i]], k[h], v[h])"
        : `qkv.explain(q[${data.head}, [i]], k[${data.kv_head}], v[${data.kv_head}]): ` +
          `grouped-query attention, query head ${data.head} reads kv head ${data.kv_head}`)),
    el("div", { cls: "row" }, [el("span", { cls: "tag query" }, "q"),
      strip(q, maxAbs, "neuron-q")]),
    scrollBox([table], "the neuron view"),
  );
}

export function mount(section) {
  root = section;
  $("#model-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.sentence = $("#sentence").value;
    state.token = null;
    model = null;
    writeURL();
    show();
  });
}

export function sync() {
  // the answer is kept: show() asks again only if the sentence changed, so the heat map on
  // screen always has its answer behind it
  $("#sentence").value = state.sentence;
}

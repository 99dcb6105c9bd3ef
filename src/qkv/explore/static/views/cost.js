// View 6 · Cost: n × n scores, the work and memory they take, and the tiles a mask lets qkv's
// kernel skip (POST /api/cost: sizes, and qkv.engine.block_map's classification).
import { Channel } from "../core/api.js";
import { lineChart, PALETTE } from "../core/chart.js";
import { announce, el, scrollBox } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { COLORS, heat, heatRGB, maskedRGB } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";
import { selectionBlock } from "../lesson/recall_selection.js";

export const name = "cost";
// the request fields the recall controls fill, by their labels (a refusal names the control)
export const LABELS = { pairs: "pairs (key:value)", asked: "asked keys", n_pairs: "pairs" };
export const READS = {
  "/api/cost": ["n", "d", "mask", "entries", "flops_dense", "flops_qkv", "naive_bytes", "qkv_bytes",
    "tile", "workers", "workers_in_use", "block", "small_problem", "small_limit", "tiles.empty", "tiles.partial", "tiles.full", "tiles.total", "grid",
    "mask_description"],
  "/api/cost/growth": ["live.methods.method", "live.methods.points.n",
    "live.methods.points.seconds", "live.methods.slope", "live.methods.stopped",
    "live.fit_from", "live.repeats",
    "live.budget_seconds", "live.busy", "shipped.methods.method", "shipped.methods.points.n",
    "shipped.methods.points.seconds", "shipped.methods.slope", "shipped.fit_from",
    "shipped.window", "shipped.command"],
  "/api/cost/recall/curves": ["command", "per_cell", "n_keys", "n_values", "d_model", "generator", "steps",
    "train_lengths", "eval_lengths", "models.kind", "models.n_state", "models.parameters",
    "models.mixer_parameters", "models.state_floats_per_layer", "models.train_seconds",
    "models.cells.length", "models.cells.pairs", "models.cells.answers", "models.cells.correct",
    "models.cells.accuracy"],
  "/api/cost/recall": ["pairs", "asked", "length", "n_keys", "n_values", "models.kind",
    "models.n_state", "models.correct", "models.total", "models.answers.position",
    "models.answers.key", "models.answers.expected", "models.answers.answer",
    "models.answers.probability", "models.answers.correct", "tokens.role", "tokens.number",
    "models.selection.delta", "models.selection.kept"],
};

let root;
const $ = (sel) => root.querySelector(sel);

const channel = new Channel(name, "/api/cost", render);

/** Bytes for people: 1.5 MB, 2 GB. */
function bytes(b) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let u = 0;
  while (b >= 1024 && u < units.length - 1) { b /= 1024; u += 1; }
  return `${b.toFixed(b < 10 && u ? 1 : 0)} ${units[u]}`;
}
const big = (x) => x >= 1e9 ? `${(x / 1e9).toFixed(2)}·10⁹` : x >= 1e6 ? `${(x / 1e6).toFixed(2)}·10⁶` : x.toLocaleString("en");

export function show() {
  $("#cost-n").value = Math.round(Math.log2(state.cost.n));
  $("#cost-n-value").textContent = `n = ${state.cost.n.toLocaleString("en")}`;
  $("#cost-mask").value = state.cost.mask;
  channel.send({ n: state.cost.n, mask: state.cost.mask });
  if (!growthAsked) {
    growthAsked = true;
    askGrowth();
  }
  if (!recallAsked) {
    recallAsked = true;
    curvesChannel.send({});
    recallChannel.send({ seed: 0, n_pairs: Number($("#recall-n").value) });
  }
}

function render(data) {
  const t = data.tiles;
  const stat = (testid, label, value, shown) => el("tr", {}, [el("th", {}, label),
    el("td", { "data-testid": testid, "data-value": value }, shown)]);
  const table = el("table", { cls: "matrix cost" }, [
    stat("cost-entries", "n × n scores", data.entries, `${big(data.entries)}`),
    stat("cost-flops-dense", `work, every pair (4·n²·d flops, d = ${data.d})`, data.flops_dense, big(data.flops_dense)),
    stat("cost-flops-qkv", "work qkv does (skipped tiles cost nothing)", data.flops_qkv, big(data.flops_qkv)),
    stat("cost-naive", "naive memory: scores + weights (n × n float32 each) + output", data.naive_bytes, bytes(data.naive_bytes)),
    stat("cost-qkv", memoryLabel(data), data.qkv_bytes, bytes(data.qkv_bytes)),
    stat("cost-skipped", "tiles skipped (empty) / partial / full", t.empty,
      `${t.empty.toLocaleString("en")} / ${t.partial.toLocaleString("en")} / ${t.full.toLocaleString("en")} of ${t.total.toLocaleString("en")}`),
  ]);
  const rows = data.grid.length;
  const cols = data.grid[0].length;
  const canvas = el("canvas", { cls: "tile-grid", "data-testid": "cost-grid", role: "img",
    "aria-label": `${rows} × ${cols} tiles of ${data.tile[0]} queries × ${data.tile[1]} keys: ${t.empty} skipped, ${t.partial} partial, ${t.full} full` });
  canvas.dataset.grid = data.grid.join("/");
  canvas.width = cols;
  canvas.height = rows;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(cols, rows);
  const palette = { 0: maskedRGB(), 1: heatRGB(0.45), 2: heatRGB(1) };
  data.grid.forEach((row, i) => [...row].forEach((c, j) => {
    const o = 4 * (i * cols + j);
    const rgb = palette[c];
    image.data.set([rgb[0], rgb[1], rgb[2], 255], o);
  }));
  ctx.putImageData(image, 0, 0);
  const side = Math.min(360, Math.max(120, cols * 12));
  canvas.style.width = `${side}px`;
  canvas.style.height = `${(side * rows) / cols}px`;
  const key = el("div", { cls: "legend-bar" }, [
    el("span", { cls: "sw-tile empty", "aria-hidden": "true" }), "skipped (no allowed pair)",
    el("span", { cls: "sw-tile partial", "aria-hidden": "true" }), "partial (mask applied per pair)",
    el("span", { cls: "sw-tile full", "aria-hidden": "true" }), "full (no mask work)"]);
  key.querySelector(".empty").style.background = COLORS.masked;
  key.querySelector(".partial").style.background = heat(0.45);
  key.querySelector(".full").style.background = heat(1);
  $("#cost-result").replaceChildren(
    scrollBox([table], "sizes, work and memory"),
    el("p", { cls: "note", "data-testid": "cost-memory-words" }, memoryWords(data)),
    el("h4", {}, `the kernel's tiles for this mask (${data.mask_description}), from qkv.engine.block_map`),
    canvas, key);
  renderTask(data);
  announce(`n ${data.n}: ${big(data.entries)} scores; naive memory ${bytes(data.naive_bytes)}, qkv ${bytes(data.qkv_bytes)}; ${t.empty} of ${t.total} tiles skipped`);
}

/** What qkv's memory row counts, in the kernel's own terms. */
function memoryLabel(data) {
  const [r, c] = data.block;
  if (data.small_problem) return `qkv's memory: one ${r} × ${c} block of scores (n² ≤ ${data.small_limit.toLocaleString("en")}: no tiling) + output`;
  const w = data.workers_in_use;
  return `qkv's memory: one ${r} × ${c} tile for each of ${w} worker${w === 1 ? "" : "s"} at work + output`;
}

/** Why the two memory figures differ (or do not), from the numbers in the table. */
function memoryWords(data) {
  const n = data.n.toLocaleString("en");
  const ratio = data.naive_bytes / data.qkv_bytes;
  if (data.small_problem) {
    return `At n = ${n} the whole score matrix has ${big(data.entries)} entries, no more than ` +
      `the ${data.small_limit.toLocaleString("en")} below which qkv does not tile: it computes ` +
      `the scores in one block, as the naive way does, but turns them into weights in place, ` +
      `so it keeps one n × n matrix where the naive way keeps two ` +
      `(${bytes(data.qkv_bytes)} against ${bytes(data.naive_bytes)}).`;
  }
  const [r, c] = data.block;
  return `At n = ${n} qkv never holds the n × n matrix: ${data.workers_in_use} ` +
    `${data.workers_in_use === 1 ? "worker holds" : "workers hold"} one ${r} × ${c} tile each, ` +
    `so its memory is ${bytes(data.qkv_bytes)} against the naive ${bytes(data.naive_bytes)}` +
    (ratio >= 1.05 ? ` (${ratio.toFixed(1)}× less).` : ".");
}

const SKIP = 0.8; // the task: qkv skips at least this share of the kernel's tiles

/** "Find a mask and an n where qkv skips at least 80% of the tiles", from the tile counts. */
function renderTask(data) {
  const box = $('[data-testid="task-skip"]');
  const t = data.tiles;
  const share = t.empty / t.total;
  const which = data.mask === "none" ? "no mask" : `the ${data.mask} mask`;
  const said = `with ${which} at n = ${data.n.toLocaleString("en")}, qkv skips ` +
    `${t.empty.toLocaleString("en")} of ${t.total.toLocaleString("en")} tiles ` +
    `(${(100 * share).toFixed(1)}%)`;
  const done = share >= SKIP;
  box.classList.toggle("done", done);
  box.textContent = done
    ? `✓ ${said[0].toUpperCase()}${said.slice(1)}: its work is ${big(data.flops_qkv)} flops ` +
      `instead of ${big(data.flops_dense)}.`
    : `Not yet: ${said}; the task needs at least ${100 * SKIP}%` +
      (t.total === 1 ? ": at this n the whole grid is one tile, so nothing can be skipped." : ".");
}

export function mount(section) {
  root = section;
  $("#growth-run").addEventListener("click", askGrowth);
  $("#recall-length").addEventListener("change", () => curves && renderCurves(curves));
  $("#recall-new").addEventListener("click", askRandom);
  $("#recall-n").addEventListener("change", askRandom);
  $("#recall-run").addEventListener("click", askEdited);
  $("#growth-max").addEventListener("change", askGrowth);
  $("#cost-n").addEventListener("input", () => {
    state.cost.n = 2 ** Number($("#cost-n").value);
    writeURL();
    show();
  });
  $("#cost-mask").addEventListener("change", () => {
    state.cost.mask = $("#cost-mask").value;
    writeURL();
    show();
  });
}

// -- time against n: O(n²) against a linear scan (POST /api/cost/growth) ----------------------
const growthChannel = new Channel(name, "/api/cost/growth", renderGrowth);
let growthAsked = false;
const METHOD_LABEL = { "qkv dense": "dense", "qkv causal": "causal", "qkv window": "window",
  "ssm scan": "state-space scan" };

/** Seconds for people: 12.3 ms, 1.45 s. */
const secs = (s) => (s >= 1 ? `${s.toFixed(2)} s` : `${(s * 1e3).toFixed(s < 0.01 ? 2 : 1)} ms`);
/** A power of ten of seconds as an axis tick: 0.1 ms, 10 ms, 1 s. */
const tick = (s) => (s >= 1 ? `${Math.round(s)} s` : `${+(s * 1e3).toPrecision(1)} ms`);
/** What a fitted slope says about growth. */
const growthWord = (k) => (k >= 1.6 ? "about n²" : k <= 1.3 ? "about n" : "between n and n²");

function askGrowth() {
  growthChannel.send({ max_n: Number($("#growth-max").value), repeats: 3 });
}

function renderGrowth(g) {
  const live = g.live.methods;
  const shipped = g.shipped.methods;
  const series = [];
  const label = (m) => (m.method === "qkv window" ? `window (w = ${g.shipped.window})`
    : METHOD_LABEL[m.method]);
  shipped.forEach((m, k) => series.push({ name: label(m), color: PALETTE[k], points: m.points.map((p) => ({ x: p.n, y: p.seconds, hollow: true,
    title: `${METHOD_LABEL[m.method]}, n = ${p.n.toLocaleString("en")}: ${secs(p.seconds)} (shipped)` })) }));
  live.forEach((m, k) => series.push({ name: `${METHOD_LABEL[m.method]}, live`, hideKey: true,
    color: PALETTE[k], dash: "4 3", points: m.points.map((p) => ({ x: p.n, y: p.seconds,
      title: `${METHOD_LABEL[m.method]}, n = ${p.n.toLocaleString("en")}: ${secs(p.seconds)} (live, just now)` })) }));
  const all = series.flatMap((s) => s.points.map((p) => p.y));
  const lo = 10 ** Math.floor(Math.log10(Math.min(...all)));
  const hi = 10 ** Math.ceil(Math.log10(Math.max(...all)));
  const yt = [];
  for (let v = lo; v <= hi * 1.001; v *= 10) yt.push(v);
  const nMax = Math.max(...series.flatMap((s) => s.points.map((p) => p.x)));
  const xt = [];
  for (let n = 64; n <= nMax; n *= 4) xt.push(n);
  const W = chartWidth($("#growth"));
  const chart = lineChart({ testid: "growth-chart", width: W, height: Math.round(W * 0.56), left: 78,
    label: "time against n, log–log: dense, causal, window and a state-space scan; filled dots timed live, hollow squares shipped",
    x: { label: "n (sequence length), log scale", log: true, domain: [48, nMax * 1.3], ticks: xt,
      format: (n) => (n >= 1024 ? `${n / 1024}k` : String(n)) },
    y: { label: "time, log scale", log: true, domain: [lo, hi], ticks: yt, format: tick },
    series, caption: "● timed live, just now, on this machine   ◻ shipped: " + g.shipped.command });
  const slopeRow = (m, k) => el("tr", {}, [el("th", {}, METHOD_LABEL[m.method]),
    el("td", { "data-testid": `growth-slope-live-${k}`, "data-value": m.slope },
      m.slope === null ? "too few points" : m.slope.toFixed(2)),
    el("td", { "data-testid": `growth-slope-shipped-${k}`, "data-value": shipped[k].slope },
      shipped[k].slope === null ? "too few points" : shipped[k].slope.toFixed(2)),
    el("td", {}, shipped[k].slope === null ? "—" : growthWord(shipped[k].slope))]);
  const table = scrollBox([el("table", { cls: "matrix", "data-testid": "growth-slopes" }, [
    el("caption", {}, "4 methods × fitted slope of log time on log n"),
    el("tr", {}, ["method", `live (n ≥ ${g.live.fit_from})`, `shipped (n ≥ ${g.shipped.fit_from.toLocaleString("en")})`, "shipped: grows"]
      .map((t) => el("th", {}, t))),
    ...live.map(slopeRow)])], "fitted slopes");
  // words from the numbers: growth, the crossover, the largest n
  const byName = Object.fromEntries(shipped.map((m) => [m.method, m]));
  const dense = byName["qkv dense"];
  const scan = byName["ssm scan"];
  const lastOf = (m) => m.points[m.points.length - 1];
  const words = [];
  words.push(`Shipped, n = ${dense.points[0].n.toLocaleString("en")} … ${lastOf(dense).n.toLocaleString("en")}: ` +
    shipped.map((m) => `${METHOD_LABEL[m.method]} grows with slope ${m.slope.toFixed(2)} ` +
      `(doubling n multiplies its time by ${(2 ** m.slope).toFixed(1)})`).join("; ") + ".");
  // the smallest n from which on the scan is faster at every shipped n
  const both = dense.points.filter((p) => scan.points.some((q) => q.n === p.n));
  const faster = both.map((p) => scan.points.find((q) => q.n === p.n).seconds < p.seconds);
  const from = faster.every((f) => f) ? 0 : faster.lastIndexOf(false) + 1;
  const cross = from < both.length ? both[from] : undefined;
  const dN = lastOf(dense);
  const sN = scan.points.find((q) => q.n === dN.n);
  if (cross && sN) {
    words.push(`The scan is faster than dense attention from n = ${cross.n.toLocaleString("en")} on` +
      `${cross.n > dense.points[0].n ? " (below that, dense attention is faster)" : ""}; ` +
      `at n = ${dN.n.toLocaleString("en")} dense takes ${secs(dN.seconds)}, the scan ${secs(sN.seconds)} ` +
      `(${(dN.seconds / sN.seconds).toFixed(1)}× less).`);
  } else {
    words.push("The scan is not faster than dense attention at any shipped n.");
  }
  const liveD = live.find((m) => m.method === "qkv dense");
  if (liveD.points.length) {
    const lp = lastOf(liveD);
    words.push(`Timed just now (best of ${g.live.repeats}, within ${g.live.budget_seconds} s): ` +
      `dense ${secs(lp.seconds)} at n = ${lp.n.toLocaleString("en")}` +
      (liveD.stopped ? ` — it stopped there: ${liveD.stopped}` : "") +
      (liveD.slope === null ? "." : `, fitted slope ${liveD.slope.toFixed(2)} on n ≥ ` +
        `${g.live.fit_from} (${liveD.slope < dense.slope ? "below" : "at or above"} the shipped ` +
        `${dense.slope.toFixed(2)}, which is fitted on n ≥ ${g.shipped.fit_from.toLocaleString("en")}).` +
        (Math.abs(liveD.slope - dense.slope) > 0.3 ? " Live timings of a few milliseconds " +
          "vary from run to run: time it again to see how much." : "")));
  }
  if (g.live.busy) words.push(g.live.busy); // other programs were busy while it was timed
  $("#growth").replaceChildren(
    el("h4", {}, "Time against n: O(n²) against a linear scan"), chart, table,
    el("div", { "data-testid": "growth-words" }, words.map((w) => el("p", {}, w))));
}

/** A chart's drawing width: the width it will be shown at (so its 13 px text stays 13 px on a
 * phone, not scaled down to 7), between 320 and 600. */
function chartWidth(box) {
  const shown = box.clientWidth || box.parentElement.clientWidth || 600;
  return Math.max(320, Math.min(600, Math.floor(shown)));
}

// -- what the n² buys: recall (MQAR), the shipped attention and state-space models -----------
const curvesChannel = new Channel(name, "/api/cost/recall/curves", renderCurves);
const recallChannel = new Channel(name, "/api/cost/recall", renderRecall);
let recallAsked = false;
let recallSeed = 0;
let curves = null;
let lastRecall = null; // the answers shown, so the selection's words can take the curves when they come
const GOOD = 0.9; // "answers well": at least this share of the asked keys

const kindLabel = (m) => (m.n_state === null ? "attention" : `state-space, N = ${m.n_state}`);
const pct = (a) => `${(100 * a).toFixed(1)}%`;
const plural = (k, one, many) => `${k.toLocaleString("en")} ${k === 1 ? one : many}`;

/** The two sentences on a fixed-size state and the test, from the shipped run's numbers. */
function introWords(c) {
  const ssm = c.models.filter((m) => m.n_state !== null);
  const sizes = ssm.map((m) => `${c.d_model} × ${m.n_state} = ` +
    `${m.state_floats_per_layer.toLocaleString("en")}`).join(" or ");
  return [
    `Mamba (Gu & Dao, 2023) and the state-space models before it read a sequence once, left to ` +
    `right, folding each token into a state of fixed size — here ${sizes} numbers per layer, ` +
    `whatever n is — so their time grows as n, not n². But a fixed-size state is all such a ` +
    `model keeps of the past: whatever it will be asked later must fit into those numbers, ` +
    `while attention keeps every token and compares the question with each of them.`,
    `The test is multi-query associative recall (MQAR, from “Zoology”, Arora et al. 2023): ` +
    `key–value pairs, then every key asked once; the model must name each key's value. ` +
    (c.generator === "zoology"
      ? `The sequences are drawn as Zoology's generator draws them: distinct keys and distinct ` +
        `values, the questions bunched near the pairs, every other place a random token. `
      : `The sequences were drawn by qkv's first generator: values may repeat, the questions ` +
        `fall anywhere after the pairs, blanks between them. `) + `Three ` +
    `models of two layers were trained the same way (${c.steps.toLocaleString("en")} steps on ` +
    `lengths ${c.train_lengths.join(" and ")}), differing only in their mixers: ` +
    c.models.map((m) => `${kindLabel(m)} ${m.mixer_parameters.toLocaleString("en")} ` +
      `parameters`).join(", ") + ".",
    `What still differs from Zoology: ${1 + c.n_keys + c.n_values} tokens (a blank, ` +
    `${c.n_keys} keys, ${c.n_values} values) where Zoology's vocabulary has 8,192; fresh ` +
    `sequences at every training step with 1 to length/4 pairs, where Zoology trains on a fixed ` +
    `set per length and pair count; a previous-token embedding that hands every model the ` +
    `pairing, where Zoology's models must learn it; and the Mamba block without its expansion ` +
    `(expand = 1, Mamba's is 2).`,
  ];
}

/** For one model at one length: up to how many pairs it answers well, and where it falls. */
function reach(m, length) {
  const cells = m.cells.filter((r) => r.length === length);
  const first = cells.find((r) => r.accuracy < GOOD);
  const last = cells[cells.length - 1];
  if (!first) return `${kindLabel(m)} answers at least ${pct(GOOD)} at every pair count, ` +
    `${pct(last.accuracy)} with ${last.pairs} pairs`;
  const at = `${kindLabel(m)} falls below ${pct(GOOD)} at ` +
    `${plural(first.pairs, "pair", "pairs")} (${pct(first.accuracy)})`;
  return first === last ? at : `${at} and answers ${pct(last.accuracy)} with ${last.pairs}`;
}

function renderCurves(c) {
  curves = c;
  $("#recall-range").textContent = `keys are numbers from 1 to ${c.n_keys}, values from 1 to ` +
    `${c.n_values}`;
  $("#recall-n").max = String(c.n_keys);
  const pick = $("#recall-length");
  if (!pick.options.length) {
    c.eval_lengths.forEach((n) => pick.append(el("option", { value: String(n) },
      `${n}${c.train_lengths.includes(n) ? "" : " (longer than trained)"}`)));
    pick.value = String(Math.max(...c.train_lengths));
  }
  const length = Number(pick.value);
  const series = c.models.map((m, k) => ({ name: kindLabel(m), color: PALETTE[k],
    points: m.cells.filter((r) => r.length === length).map((r) => ({ x: r.pairs, y: r.accuracy,
      title: `${kindLabel(m)}, ${r.pairs} pairs: ${r.correct} of ${r.answers} right` })) }));
  const pairs = series[0].points.map((p) => p.x);
  const W = chartWidth($("#recall-curves"));
  const chart = lineChart({ testid: "recall-chart", width: W, height: Math.round(W * 0.56),
    label: `held-out recall accuracy against the number of key–value pairs at length ${length}`,
    x: { label: "key–value pairs, log scale", log: true,
      domain: [pairs[0] / 1.3, pairs[pairs.length - 1] * 1.3], ticks: pairs, format: String },
    y: { label: "accuracy", domain: [0, 1], ticks: [0, 0.25, 0.5, 0.75, 1], format: (v) => v.toFixed(2) },
    refY: { value: 1 / c.n_values, label: `chance (1 in ${c.n_values})` },
    series, caption: `held-out: ${c.per_cell} sequences per cell; trained by ${c.command}` });
  const head = el("tr", {}, ["length", "pairs", ...c.models.map(kindLabel)].map((t) => el("th", {}, t)));
  const rows = c.models[0].cells.map((cell) => el("tr", {}, [
    el("td", {}, String(cell.length)), el("td", {}, String(cell.pairs)),
    ...c.models.map((m) => {
      const r = m.cells.find((x) => x.length === cell.length && x.pairs === cell.pairs);
      return el("td", { "data-testid": `recall-acc-${m.kind}-${r.length}-${r.pairs}`,
        "data-value": r.accuracy, title: `${r.correct} of ${r.answers}` }, r.accuracy.toFixed(3));
    })]));
  const table = scrollBox([el("table", { cls: "matrix", "data-testid": "recall-table" }, [
    el("caption", {}, "held-out accuracy at the asked keys, every length and pair count"),
    head, ...rows])], "recall accuracy per length and pairs");
  $("#recall-intro").replaceChildren(...introWords(c).map((w) => el("p", {}, w)));
  $("#recall-curves").replaceChildren(chart,
    el("p", { "data-testid": "recall-words" }, `At length ${length}` +
      (c.train_lengths.includes(length) ? "" : " (longer than any training sequence)") + ": " +
      c.models.map((m) => reach(m, length)).join("; ") + "."),
    table);
  const shownSelection = $('[data-testid="recall-selection"]');
  if (shownSelection && lastRecall) shownSelection.replaceWith(selectionBlock(lastRecall, c));
}

/** "3:17 9:4 …" → [[3, 17], [9, 4], …]; a sentence naming the first thing that is not a pair. */
function parsePairs(text) {
  const out = [];
  for (const item of text.split(/[\s,;]+/).filter(Boolean)) {
    const m = /^(\d+)\s*[:=]\s*(\d+)$/.exec(item);
    if (!m) throw new Error(`pairs: write each pair as key:value, e.g. 3:17 — “${item}” is not one`);
    out.push([Number(m[1]), Number(m[2])]);
  }
  if (!out.length) throw new Error("pairs: write at least one pair as key:value, e.g. 3:17");
  return out;
}

function parseAsked(text) {
  const items = text.split(/[\s,;]+/).filter(Boolean);
  const bad = items.find((k) => !/^\d+$/.test(k));
  if (bad !== undefined) throw new Error(`asked keys: write key numbers separated by spaces — “${bad}” is not one`);
  if (!items.length) throw new Error("asked keys: ask at least one key");
  return items.map(Number);
}

/** New random pairs, as many as the pairs field says (1 … the number of keys). */
function askRandom() {
  const n = Number($("#recall-n").value);
  const most = Number($("#recall-n").max);
  if (!Number.isInteger(n) || n < 1 || n > most) {
    showError(name, new Error(`pairs: choose a whole number of pairs from 1 to ${most}`));
    return;
  }
  recallSeed += 1;
  recallChannel.send({ seed: recallSeed, n_pairs: n });
}

function askEdited() {
  try {
    recallChannel.send({ pairs: parsePairs($("#recall-pairs").value),
      asked: parseAsked($("#recall-asked").value) });
  } catch (err) {
    showError(name, err);
  }
}

function renderRecall(r) {
  $("#recall-pairs").value = r.pairs.map(([k, v]) => `${k}:${v}`).join(" ");
  $("#recall-asked").value = r.asked.join(" ");
  $("#recall-n").value = String(r.pairs.length);
  const head = el("tr", {}, ["asked key", "stored value", ...r.models.map(kindLabel)]
    .map((t) => el("th", {}, t)));
  const rows = r.models[0].answers.map((a, i) => el("tr", {}, [
    el("td", {}, String(a.key)), el("td", {}, String(a.expected)),
    ...r.models.map((m) => {
      const b = m.answers[i];
      return el("td", { "data-testid": `recall-answer-${m.kind}-${i}`, "data-value": b.answer ?? "",
        cls: b.correct ? "right" : "wrong" },
      `${b.correct ? "✓" : "✗"} ${b.answer === null ? "not a value" : b.answer} ` +
        `(${b.probability.toFixed(2)})`);
    })]));
  const table = scrollBox([el("table", { cls: "matrix", "data-testid": "recall-answers" }, [
    el("caption", {}, `${plural(r.asked.length, "question", "questions")} on ` +
      `${plural(r.pairs.length, "pair", "pairs")}: each model's answer and its probability`),
    head, ...rows])], "each model's answers");
  const said = `On this sequence (${plural(r.pairs.length, "pair", "pairs")}, ${r.length} tokens): ` +
    r.models.map((m) => `${kindLabel(m)}: ${m.correct} of ${m.total} right`).join("; ") + ".";
  lastRecall = r;
  $("#recall-result").replaceChildren(el("p", { "data-testid": "recall-said" }, said), table,
    selectionBlock(r, curves));
  renderRecallTask(r);
  announce(said);
}

/** The task: a sequence where attention answers every question and the small state misses one. */
function renderRecallTask(r) {
  const box = $('[data-testid="task-recall"]');
  const att = r.models.find((m) => m.kind === "attention");
  const small = r.models.find((m) => m.kind === "ssm-small");
  const done = att.correct === att.total && small.correct < small.total;
  const said = `with ${plural(r.pairs.length, "pair", "pairs")}, attention answers ` +
    `${att.correct} of ${att.total} and the N = ${small.n_state} state-space model ` +
    `${small.correct} of ${small.total}`;
  box.classList.toggle("done", done);
  box.textContent = done
    ? `✓ ${said[0].toUpperCase()}${said.slice(1)}: its fixed-size state lost a pair that ` +
      `attention, which keeps every token, still finds.`
    : `Not yet: ${said}` + (att.correct < att.total
      ? "; attention must answer every question too." : "; add pairs until the small state misses one.");
}

export function sync() {}

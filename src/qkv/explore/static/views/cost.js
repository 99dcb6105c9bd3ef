// View 6 · Cost: n × n scores, the work and memory they take, and the tiles a mask lets qkv's
// kernel skip (POST /api/cost: sizes, and qkv.engine.block_map's classification).
import { Channel } from "../core/api.js";
import { lineChart, PALETTE } from "../core/chart.js";
import { announce, el, scrollBox } from "../core/dom.js";
import { COLORS, heat, heatRGB, maskedRGB } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";

export const name = "cost";
export const READS = {
  "/api/cost": ["n", "d", "mask", "entries", "flops_dense", "flops_qkv", "naive_bytes", "qkv_bytes",
    "tile", "workers", "tiles.empty", "tiles.partial", "tiles.full", "tiles.total", "grid",
    "mask_description"],
  "/api/cost/growth": ["live.methods.method", "live.methods.points.n",
    "live.methods.points.seconds", "live.methods.slope", "live.methods.stopped",
    "live.fit_from", "live.repeats",
    "live.budget_seconds", "shipped.methods.method", "shipped.methods.points.n",
    "shipped.methods.points.seconds", "shipped.methods.slope", "shipped.fit_from",
    "shipped.window", "shipped.command",
    "evidence.farback.attention.accuracy", "evidence.farback.attention.worst_accuracy",
    "evidence.farback.gru.accuracy", "evidence.farback.recency.accuracy",
    "evidence.farback_held_out", "evidence.seq2seq.attention.lengths",
    "evidence.seq2seq.attention.token_accuracy", "evidence.seq2seq.fixed.token_accuracy",
    "evidence.seq2seq_per_bucket", "evidence_missing"],
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
}

function render(data) {
  const t = data.tiles;
  const stat = (testid, label, value, shown) => el("tr", {}, [el("th", {}, label),
    el("td", { "data-testid": testid, "data-value": value }, shown)]);
  const table = el("table", { cls: "matrix cost" }, [
    stat("cost-entries", "n × n scores", data.entries, `${big(data.entries)}`),
    stat("cost-flops-dense", `work, every pair (4·n²·d flops, d = ${data.d})`, data.flops_dense, big(data.flops_dense)),
    stat("cost-flops-qkv", "work qkv does (skipped tiles cost nothing)", data.flops_qkv, big(data.flops_qkv)),
    stat("cost-naive", "naive memory: scores + weights, n × n float32 each", data.naive_bytes, bytes(data.naive_bytes)),
    stat("cost-qkv", `qkv's memory: one ${data.tile[0]} × ${data.tile[1]} tile per worker (${data.workers}) + output`, data.qkv_bytes, bytes(data.qkv_bytes)),
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
    el("h4", {}, `the kernel's tiles for this mask (${data.mask_description}), from qkv.engine.block_map`),
    canvas, key);
  renderTask(data);
  announce(`n ${data.n}: ${big(data.entries)} scores; naive memory ${bytes(data.naive_bytes)}, qkv ${bytes(data.qkv_bytes)}; ${t.empty} of ${t.total} tiles skipped`);
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
  const chart = lineChart({ testid: "growth-chart", width: 600, height: 320, left: 78,
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
  $("#growth").replaceChildren(
    el("h4", {}, "Time against n: O(n²) against a linear scan"), chart, table,
    el("div", { "data-testid": "growth-words" }, words.map((w) => el("p", {}, w))),
    el("p", { "data-testid": "growth-buys" }, g.evidence ? buysSentence(g.evidence) :
      `What the n² buys is measured on the shipped models, which cannot be loaded here: ` +
      `${g.evidence_missing}.`));
}

// What the quadratic cost buys, written from the shipped models' held-out scores.
function buysSentence(ev) {
  const fa = ev.farback;
  const near = (a) => (Math.abs(a - 0.5) < 0.06 ? " — near chance" : "");
  const s2 = ev.seq2seq;
  const longest = s2.attention.length - 1;
  const bucket = s2.attention[longest].lengths;
  const buys = `What the n² buys, measured on the shipped models: far back, attention answers ` +
    `${fa.attention.accuracy.toFixed(3)} of ${ev.farback_held_out.toLocaleString("en")} held-out series right ` +
    `(worst lag bucket ${fa.attention.worst_accuracy.toFixed(3)}), the GRU ${fa.gru.accuracy.toFixed(3)}` +
    `${near(fa.gru.accuracy)}, the learned recency average ${fa.recency.accuracy.toFixed(3)}${near(fa.recency.accuracy)}. ` +
    `Encoder–decoder, inputs of ${bucket[0]}–${bucket[1]} symbols: attention gets ` +
    `${s2.attention[longest].token_accuracy.toFixed(3)} of the symbols right, the fixed context vector ` +
    `${s2.fixed[longest].token_accuracy.toFixed(3)} (${ev.seq2seq_per_bucket.toLocaleString("en")} held-out inputs per length bucket).`;
  return buys;
}

export function sync() {}

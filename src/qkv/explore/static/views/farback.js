// View 8 · Far back: "a relevant piece of context … arbitrarily far back in the window … found
// on its merits, not on its recency". The shipped far-back models (attention, a learned
// recency average, a GRU) read a series the learner edits (POST /api/farback): each model's
// answer, the truth, and the attention model's weights over the steps; and their accuracy by
// lag on the held-out set (POST /api/farback/curves). Every sentence is written from those
// numbers.
import { Channel } from "../core/api.js";
import { announce, el, fmt, scrollBox, svg } from "../core/dom.js";
import { lineChart, PALETTE } from "../core/chart.js";
import { defineState, state, writeURL } from "../core/state.js";

export const name = "farback";
export const READS = {
  "/api/farback": ["seed", "window", "trained_lags", "types", "sizes", "signs", "event.lag",
    "event.sign", "event.size", "distractor_lags",
    "models.attention.prediction", "models.attention.p_plus", "models.attention.correct",
    "models.recency.prediction", "models.recency.p_plus", "models.recency.correct",
    "models.gru.prediction", "models.gru.p_plus", "models.gru.correct",
    "weights", "attention.top_lag", "attention.weight_on_event",
    "attention.weight_on_distractors", "attention.max_distractor_weight"],
  "/api/farback/curves": ["held_out", "top_weight_on_event", "mean_weight_on_event",
    "models.attention.accuracy", "models.attention.by_lag.lags",
    "models.attention.by_lag.cases", "models.attention.by_lag.accuracy",
    "models.recency.accuracy", "models.recency.by_lag.lags", "models.recency.by_lag.cases",
    "models.recency.by_lag.accuracy", "models.gru.accuracy", "models.gru.by_lag.lags",
    "models.gru.by_lag.cases", "models.gru.by_lag.accuracy"],
};

const KINDS = ["attention", "recency", "gru"];
const LABEL = { attention: "attention", recency: "recency (learned decay)", gru: "GRU" };
const NEAR_CHANCE = 0.06; // |accuracy − 0.5| below this is called "near chance"

// lag: 0 = where the seed put it; sign: 0 = the seed's; distractors: null = the seed's
defineState("far", { seed: 0, lag: 0, sign: 0, distractors: null });

let root;
let last = null; // the last answer, for toggling a distractor by clicking its step
const $ = (sel) => root.querySelector(sel);
const channel = new Channel(name, "/api/farback", render);
const curvesChannel = new Channel(name, "/api/farback/curves", renderCurves);
let curvesAsked = false;

const signText = (s) => (s > 0 ? "+" : "−");
/** A weight for a sentence: 3 decimals, or 2 significant digits below 0.001 (not "0.000"). */
const w3 = (x) => (x >= 0.001 || x === 0 ? fmt(x, 3) : x.toExponential(1));

function request() {
  const f = state.far;
  const body = { seed: f.seed };
  if (f.lag) body.event_lag = f.lag;
  if (f.sign) body.event_sign = f.sign;
  if (Array.isArray(f.distractors)) body.distractor_lags = f.distractors;
  return body;
}

export function show() {
  $("#far-seed").value = state.far.seed;
  channel.send(request());
  if (!curvesAsked) {
    curvesAsked = true;
    curvesChannel.send({});
  }
}

/** The series (signed size per step) above, the attention weights below; oldest step left. */
function seriesPlot(d) {
  const W = d.window;
  const width = 780;
  const left = 44;
  const step = (width - left - 8) / W;
  const top = 8;
  const h1 = 120; // series panel: signed size, ±8
  const gap = 44;
  const h2 = 110; // weights panel
  const H = top + h1 + gap + h2 + 34;
  const x = (i) => left + i * step;
  const maxW = Math.max(...d.weights);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${H}`, cls: "chart far-plot", role: "img",
    "data-testid": "far-plot", "aria-label": `the series of ${W} trades (signed size per step, ` +
      `oldest left) and the attention model's weight on each step; the event at lag ` +
      `${d.event.lag}, ${d.distractor_lags.length} distractor blocks` });
  const text = (tx, ty, s, attrs = {}) => {
    const node = svg("text", { x: tx, y: ty, cls: "chart-text", ...attrs });
    node.textContent = s;
    chart.append(node);
  };
  const mid = top + h1 / 2;
  chart.append(svg("line", { x1: left, y1: mid, x2: width - 8, y2: mid, cls: "chart-axis" }));
  text(left - 6, top + 10, "+8", { "text-anchor": "end" });
  text(left - 6, top + h1, "−8", { "text-anchor": "end" });
  text(left, top + h1 + 14, "trade size × sign (event green, distractors red)");
  const base = top + h1 + gap + h2;
  chart.append(svg("line", { x1: left, y1: base, x2: width - 8, y2: base, cls: "chart-axis" }));
  text(left - 6, top + h1 + gap + 10, fmt(maxW, 2), { "text-anchor": "end" });
  text(left - 6, base, "0", { "text-anchor": "end" });
  const event = W - d.event.lag;
  const dis = new Set(d.distractor_lags.map((lag) => W - lag));
  for (let i = 0; i < W; i += 1) {
    const kind = i === event ? "event" : dis.has(i) ? "distractor" : "small";
    const v = d.sizes[i] * d.signs[i];
    const hh = (Math.abs(v) / 8) * (h1 / 2);
    const bar = svg("rect", { x: x(i), y: v > 0 ? mid - hh : mid, width: Math.max(step - 0.4, 0.8),
      height: Math.max(hh, 0.5), cls: `far-bar ${kind}`, "data-lag": W - i });
    const tip = svg("title");
    tip.textContent = `lag ${W - i}: type ${d.types[i]}, size ${fmt(d.sizes[i], 2)}, sign ` +
      `${signText(d.signs[i])}${kind === "small" ? "" : ` — the ${kind}`}; click to ` +
      `${kind === "distractor" ? "remove this distractor" : kind === "event" ? "" : "place a distractor here"}`;
    bar.append(tip);
    chart.append(bar);
    const wh = (d.weights[i] / maxW) * h2;
    const wbar = svg("rect", { x: x(i), y: base - wh, width: Math.max(step - 0.4, 0.8),
      height: Math.max(wh, 0), cls: `far-w ${kind}`, "data-testid": `far-w-${W - i}`,
      "data-value": d.weights[i] });
    const wtip = svg("title");
    wtip.textContent = `lag ${W - i}: weight ${fmt(d.weights[i])}`;
    wbar.append(wtip);
    chart.append(wbar);
  }
  const mark = (i, cls, label) => {
    chart.append(svg("path", { d: `M${x(i) + step / 2},${base + 4} l-5,9 h10 z`, cls }));
    if (label) text(x(i) + step / 2, base + 26, label, { "text-anchor": "middle" });
  };
  for (const i of dis) mark(i, "far-mark distractor", "");
  mark(event, "far-mark event", `event, lag ${d.event.lag}`);
  text(left, top + h1 + gap - 4, "the attention model's weight on each step");
  for (const [lag, anchor] of [[W, "start"], [Math.round(W / 2), "middle"], [1, "end"]]) {
    text(x(W - lag) + (anchor === "end" ? step : 0), H - 2, `lag ${lag}`, { "text-anchor": anchor });
  }
  chart.addEventListener("click", (event) => {
    const lag = Number(event.target.dataset && event.target.dataset.lag);
    if (lag) toggleDistractor(lag);
  });
  return chart;
}

function toggleDistractor(lag) {
  if (!last || lag === last.event.lag) return;
  const now = new Set(last.distractor_lags);
  if (now.has(lag)) now.delete(lag); else now.add(lag);
  state.far.distractors = [...now].sort((a, b) => a - b);
  writeURL();
  show();
}

function modelsTable(d) {
  const rows = KINDS.map((kind) => {
    const r = d.models[kind];
    return el("tr", {}, [el("th", {}, LABEL[kind]),
      el("td", { "data-testid": `far-pred-${kind}`, "data-value": r.prediction },
        signText(r.prediction)),
      el("td", { "data-testid": `far-p-${kind}`, "data-value": r.p_plus }, fmt(r.p_plus, 3)),
      el("td", { cls: r.correct ? "ok" : "bad" }, r.correct ? "right" : "wrong")]);
  });
  return scrollBox([el("table", { cls: "matrix", "data-testid": "far-models" }, [
    el("caption", {}, "3 models × this series: each model's answer"),
    el("tr", {}, ["model", "answers", "P(sign = +)", `truth ${signText(d.event.sign)}`]
      .map((t) => el("th", {}, t))),
    ...rows])], "each model's answer");
}

/** Sentences written from the answer's numbers. */
function sentences(d) {
  const W = d.window;
  const nd = d.distractor_lags.length;
  const recent = d.distractor_lags.filter((lag) => lag < d.event.lag).length;
  const out = [];
  out.push(`The event is a type-0 block trade of size ${fmt(d.event.size, 2)} at lag ` +
    `${d.event.lag} (${d.event.lag} steps before the end of a ${W}-step window), sign ` +
    `${signText(d.event.sign)}: that sign is the answer. ` + (nd === 0
    ? "There are no distractor blocks."
    : `${nd} block trade${nd === 1 ? "" : "s"} of other types ${nd === 1 ? "is a distractor" : "are distractors"}` +
      (recent ? `, ${recent} of them more recent than the event.` : ", none more recent than the event.")));
  if (d.event.lag < d.trained_lags[0]) {
    out.push(`Lag ${d.event.lag} is shorter than any the models were trained on ` +
      `(${d.trained_lags[0]}–${d.trained_lags[1]}).`);
  }
  const a = d.attention;
  out.push(a.top_lag === d.event.lag
    ? `The attention model's largest weight, ${w3(a.weight_on_event)}, is on the event ` +
      `${d.event.lag} steps back` + (nd ? `; all ${nd} distractors together get ` +
      `${w3(a.weight_on_distractors)} (the largest ${w3(a.max_distractor_weight)}).` : ".")
    : `The attention model's largest weight is at lag ${a.top_lag}, not on the event ` +
      `(${w3(a.weight_on_event)} there).`);
  const right = KINDS.filter((k) => d.models[k].correct).map((k) => LABEL[k]);
  const wrong = KINDS.filter((k) => !d.models[k].correct).map((k) => LABEL[k]);
  const coin = KINDS.filter((k) => Math.abs(d.models[k].p_plus - 0.5) < NEAR_CHANCE)
    .map((k) => `${LABEL[k]} ${fmt(d.models[k].p_plus, 3)}`);
  out.push(`Right on this series: ${right.join(", ") || "none"}. Wrong: ${wrong.join(", ") || "none"}.` +
    (coin.length ? ` Within ${NEAR_CHANCE} of a coin flip, P(+): ${coin.join(", ")}.` : ""));
  return out;
}

function render(d) {
  last = d;
  $("#far-lag").max = String(d.window);
  $("#far-lag").value = String(d.event.lag);
  $("#far-lag-value").textContent = `lag ${d.event.lag}`;
  $("#far-sign").textContent = `event sign ${signText(d.event.sign)} (flip)`;
  $("#far-distractors").value = d.distractor_lags.slice().sort((a, b) => a - b).join(", ");
  const plot = scrollBox([seriesPlot(d)], "the series and the attention weights");
  plot.classList.add("far-scroll"); // a phone scrolls it sideways
  $("#far-result").replaceChildren(
    plot,
    modelsTable(d),
    el("div", { "data-testid": "far-words" }, sentences(d).map((s) => el("p", {}, s))));
  // on a narrow screen the plot scrolls: start with the event in view
  plot.scrollLeft = ((d.window - d.event.lag) / d.window) * plot.scrollWidth - plot.clientWidth / 2;
  renderTask(d);
  announce(sentences(d).join(" "));
}

const FAR = 150; // the task: the event at least this many steps back

/** "With the event far back, make recency and the GRU wrong while attention stays right", from
 * the event's lag, each model's answer and the truth. */
function renderTask(d) {
  const box = $('[data-testid="task-far"]');
  const said = (k) => `${LABEL[k]} answers ${signText(d.models[k].prediction)} ` +
    `(${d.models[k].correct ? "right" : "wrong"}, P(+) = ${fmt(d.models[k].p_plus, 3)})`;
  const answers = KINDS.map(said).join(", ");
  const where = `the event is ${d.event.lag} steps back, sign ${signText(d.event.sign)}`;
  const far = d.event.lag >= FAR;
  const m = d.models;
  const done = far && m.attention.correct && !m.recency.correct && !m.gru.correct;
  box.classList.toggle("done", done);
  if (done) {
    box.textContent = `✓ ${where[0].toUpperCase()}${where.slice(1)}: ${answers}.`;
    return;
  }
  const need = [];
  if (!far) need.push(`move it to lag ${FAR} or more`);
  if (!m.attention.correct) need.push("attention must stay right");
  const right = ["recency", "gru"].filter((k) => m[k].correct).map((k) => LABEL[k]);
  if (right.length) need.push(`${right.join(" and ")} must answer wrong`);
  box.textContent = `Not yet: ${where}; ${answers}. Still: ${need.join("; ")}.`;
}

function renderCurves(c) {
  const buckets = c.models.attention.by_lag;
  const mids = buckets.map((b) => (b.lags[0] + b.lags[1]) / 2);
  const chart = lineChart({
    testid: "far-curves", label: `accuracy by lag of the three models on ${c.held_out} held-out series`,
    x: { label: "lag of the event (steps back)", domain: [0, buckets[buckets.length - 1].lags[1]],
      ticks: buckets.map((b) => b.lags[1]).concat([0]), format: (v) => String(v) },
    y: { label: "accuracy", domain: [0, 1], ticks: [0, 0.25, 0.5, 0.75, 1], format: (v) => fmt(v, 2) },
    refY: { value: 0.5, label: "chance" },
    series: KINDS.map((kind, k) => ({ name: `${LABEL[kind]} (all lags ${fmt(c.models[kind].accuracy, 3)})`,
      color: PALETTE[k], points: c.models[kind].by_lag.map((b, i) => ({ x: mids[i], y: b.accuracy,
        title: `${LABEL[kind]}, lags ${b.lags[0]}–${b.lags[1]}: ${fmt(b.accuracy, 3)} of ${b.cases}` })) })),
  });
  const table = scrollBox([el("table", { cls: "matrix", "data-testid": "far-curves-table" }, [
    el("caption", {}, `3 models × ${buckets.length} lag buckets: held-out accuracy`),
    el("tr", {}, [el("th", {}, "model"), ...buckets.map((b) => el("th", {}, `lag ${b.lags[0]}–${b.lags[1]}`)),
      el("th", {}, "all")]),
    ...KINDS.map((kind) => el("tr", {}, [el("th", {}, LABEL[kind]),
      ...c.models[kind].by_lag.map((b, i) => el("td", { "data-testid": `far-acc-${kind}-${i}`,
        "data-value": b.accuracy }, fmt(b.accuracy, 3))),
      el("td", { "data-testid": `far-acc-${kind}`, "data-value": c.models[kind].accuracy },
        fmt(c.models[kind].accuracy, 3))]))])], "held-out accuracy by lag");
  const acc = (k) => c.models[k].accuracy;
  const lows = (k) => Math.min(...c.models[k].by_lag.map((b) => b.accuracy));
  const words = KINDS.map((k) => {
    const near = Math.abs(acc(k) - 0.5) < NEAR_CHANCE;
    return `${LABEL[k]} ${fmt(acc(k), 3)} (lowest lag bucket ${fmt(lows(k), 3)}` +
      `${near ? ", near chance" : ""})`;
  });
  $("#far-curves").replaceChildren(
    el("h4", {}, `Accuracy by lag, ${c.held_out.toLocaleString("en")} held-out series`),
    chart, table,
    el("p", { "data-testid": "far-curves-words" }, `Right answers over all lags: ${words.join("; ")}. ` +
      `The attention model's largest weight is on the event in ${fmt(c.top_weight_on_event, 3)} of ` +
      `the series (mean weight there ${fmt(c.mean_weight_on_event, 3)}).`));
}

export function mount(section) {
  root = section;
  const again = () => { writeURL(); show(); };
  $("#far-new").addEventListener("click", () => {
    Object.assign(state.far, { seed: state.far.seed + 1, lag: 0, sign: 0, distractors: null });
    again();
  });
  $("#far-seed").addEventListener("change", () => {
    const v = Number($("#far-seed").value);
    Object.assign(state.far, { seed: Number.isInteger(v) ? v : -1, lag: 0, sign: 0, distractors: null });
    again();
  });
  $("#far-lag").addEventListener("input", () => {
    state.far.lag = Number($("#far-lag").value);
    $("#far-lag-value").textContent = `lag ${state.far.lag}`;
    if (Array.isArray(state.far.distractors)) { // the event takes the step over
      state.far.distractors = state.far.distractors.filter((d) => d !== state.far.lag);
    }
    again();
  });
  $("#far-sign").addEventListener("click", () => {
    state.far.sign = last ? -last.event.sign : -1;
    again();
  });
  $("#far-distractor-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("#far-distractors").value.trim();
    const parts = text === "" ? [] : text.split(/[\s,]+/).map(Number);
    state.far.distractors = parts.map((v) => (Number.isInteger(v) ? v : -1));
    again();
  });
  $("#far-none").addEventListener("click", () => { state.far.distractors = []; again(); });
  $("#far-recent").addEventListener("click", () => {
    // a block at every lag between the event and the end, up to 8: the most recent trades
    const lag = last ? last.event.lag : 1;
    state.far.distractors = Array.from({ length: Math.min(8, lag - 1) }, (_, i) => i + 1);
    again();
  });
  $("#far-reset").addEventListener("click", () => {
    Object.assign(state.far, { lag: 0, sign: 0, distractors: null });
    again();
  });
}

export function sync() {}

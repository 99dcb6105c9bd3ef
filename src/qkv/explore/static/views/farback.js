// View 8 · Far back: "a relevant piece of context … arbitrarily far back in the window … found
// on its merits, not on its recency". The shipped far-back models (attention, a learned
// recency average, a GRU), trained on events 1 to 256 steps back, read a series the learner
// edits (POST /api/farback): each model's answer, the truth, the attention model's weights,
// and every model's answer with the event moved to each lag of the window (the sweep). Their
// accuracy by lag on the held-out set, where each falls to chance, and how each one's reach
// grew in training come from the shipped run (POST /api/farback/curves), beside a plain tanh
// RNN's (the recurrent chain the lesson says decays; no gates, the GRU's parameter budget).
// Every sentence is written from those numbers.
import { Channel } from "../core/api.js";
import { announce, el, fmt, svg } from "../core/dom.js";
import { clearError, showError } from "../core/errors.js";
import { lineChart, PALETTE, patternSwatch, styleLine } from "../core/chart.js";
import { defineState, state, writeURL } from "../core/state.js";

export const name = "farback";
export const READS = {
  "/api/farback": ["seed", "window", "trained_lags", "types", "sizes", "signs", "event.lag",
    "event.sign", "event.size", "distractor_lags",
    "models.attention.prediction", "models.attention.p_plus", "models.attention.correct",
    "models.recency.prediction", "models.recency.p_plus", "models.recency.correct",
    "models.gru.prediction", "models.gru.p_plus", "models.gru.correct",
    "weights", "attention.top_lag", "attention.weight_on_event",
    "attention.weight_on_distractors", "attention.max_distractor_weight",
    "sweep.lags", "sweep.truth", "sweep.models.attention.p_plus",
    "sweep.models.attention.correct", "sweep.models.recency.p_plus",
    "sweep.models.recency.correct", "sweep.models.gru.p_plus", "sweep.models.gru.correct",
    "sweep.models.attention.p_plus_flipped", "sweep.models.attention.reads",
    "sweep.models.recency.p_plus_flipped", "sweep.models.recency.reads",
    "sweep.models.gru.p_plus_flipped", "sweep.models.gru.reads"],
  "/api/farback/curves": [
    "held_out", "per_bucket", "window", "command", "top_weight_on_event", "mean_weight_on_event",
    "models.attention.parameters", "models.attention.steps", "models.attention.train_seconds",
    "models.attention.accuracy", "models.attention.by_lag.lags", "models.attention.by_lag.cases",
    "models.attention.by_lag.correct", "models.attention.by_lag.accuracy",
    "models.attention.by_lag.interval", "models.attention.chance_from",
    "models.attention.progress.per_bucket", "models.attention.progress.steps",
    "models.attention.progress.accuracy", "models.attention.progress.chance_from",
    "models.recency.parameters", "models.recency.steps", "models.recency.train_seconds",
    "models.recency.accuracy", "models.recency.by_lag.lags", "models.recency.by_lag.cases",
    "models.recency.by_lag.correct", "models.recency.by_lag.accuracy",
    "models.recency.by_lag.interval", "models.recency.chance_from",
    "models.recency.progress.per_bucket", "models.recency.progress.steps",
    "models.recency.progress.accuracy", "models.recency.progress.chance_from",
    "models.gru.parameters", "models.gru.steps", "models.gru.train_seconds",
    "models.gru.accuracy", "models.gru.by_lag.lags", "models.gru.by_lag.cases",
    "models.gru.by_lag.correct", "models.gru.by_lag.accuracy", "models.gru.by_lag.interval",
    "models.gru.chance_from", "models.gru.progress.per_bucket", "models.gru.progress.steps",
    "models.gru.progress.accuracy", "models.gru.progress.chance_from", "gru_tuned.parameters",
    "gru_tuned.steps", "gru_tuned.train_seconds", "gru_tuned.accuracy", "gru_tuned.by_lag.lags",
    "gru_tuned.by_lag.accuracy", "gru_tuned.chance_from", "gru_tuned.progress.steps",
    "gru_tuned.progress.chance_from", "gru_tuned.gate_bias", "gru_tuned.command",
    "rnn_command", "models.attention.units", "models.recency.units", "models.gru.units",
    "models.rnn.units", "models.rnn.parameters", "models.rnn.steps", "models.rnn.train_seconds",
    "models.rnn.accuracy", "models.rnn.by_lag.lags", "models.rnn.by_lag.cases",
    "models.rnn.by_lag.correct", "models.rnn.by_lag.accuracy", "models.rnn.by_lag.interval",
    "models.rnn.chance_from", "models.rnn.progress.per_bucket", "models.rnn.progress.steps",
    "models.rnn.progress.accuracy", "models.rnn.progress.chance_from"],
};

const KINDS = ["attention", "recency", "gru"]; // the models that read the learner's series
const CURVE_KINDS = [...KINDS, "rnn"]; // the shipped runs' curves: the plain RNN's too
const LABEL = { attention: "attention", recency: "recency average", gru: "GRU", rnn: "plain RNN" };
// Each model's line pattern and marker, in both charts and their legends: where curves coincide
// (attention and the GRU are right at every lag), attention's wide pale line and open ring
// stay visible around the GRU's dashes and triangles drawn over them.
const STYLE = {
  attention: { marker: "ring", lineWidth: 5, opacity: 0.45 },
  recency: { dash: "2 3", marker: "square" },
  gru: { dash: "7 4", marker: "triangle" },
  rnn: { dash: "10 3 2 3", marker: "diamond" },
};
const MAX_SEED = 2 ** 31 - 1;
const MAX_DISTRACTORS = 64;

// lag: 0 = where the sampler put it; sign: 0 = the sampler's; distractors: null = as sampled
defineState("far", { seed: 0, lag: 0, sign: 0, distractors: null });

let root;
let last = null; // the last answer (for clicks on steps and for redrawing at a new width)
let lastCurves = null;
const $ = (sel) => root.querySelector(sel);
const channel = new Channel(name, "/api/farback", (data, body) => {
  // the learner's latest input wins: an answer for a lag, sign or series no longer asked for
  // is dropped, never drawn over the slider the learner has moved on
  if (JSON.stringify(body) === JSON.stringify(request())) render(data);
});
const curvesChannel = new Channel(name, "/api/farback/curves", renderCurves);
let curvesAsked = false;

const signText = (s) => (s > 0 ? "+" : "−");
const plural = (n, one, many = `${one}s`) => `${n.toLocaleString("en")} ${n === 1 ? one : many}`;
const lagsText = (lags) => (lags[1] > lags[0] ? `${lags[0]}–${lags[1]}` : `${lags[0]}`);
/** A weight for a sentence: 3 decimals, or 2 significant digits below 0.001 (not "0.000"). */
const w3 = (x) => (x >= 0.001 || x === 0 ? fmt(x, 3) : x.toExponential(1));
/** The width a chart is drawn at: its box's own, so 13 px text stays 13 px on a phone. */
const widthOf = (node, most) => Math.max(280, Math.min(most, Math.floor(node.clientWidth || most)));

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

// -- the series and the attention weights -------------------------------------------------------
/** The series (signed size per step) above, the attention weights below; oldest step left. */
function seriesPlot(d, width) {
  const W = d.window;
  const left = 40;
  const right = 6;
  const step = (width - left - right) / W;
  const top = 14;
  const h1 = 100; // series panel: signed size, ±8
  const gap = 30;
  const h2 = 90; // weights panel
  const H = top + h1 + gap + h2 + 40;
  const x = (i) => left + i * step;
  const maxW = Math.max(...d.weights);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${H}`, cls: "chart far-plot", role: "img",
    "data-testid": "far-plot", "aria-label": `the series of ${W} trades (signed size per step, ` +
      `oldest left) and the attention model's weight on each step; the event at lag ` +
      `${d.event.lag}, ${plural(d.distractor_lags.length, "distractor block")}` });
  const text = (tx, ty, s, attrs = {}) => {
    const node = svg("text", { x: tx, y: ty, cls: "chart-text", ...attrs });
    node.textContent = s;
    chart.append(node);
  };
  const mid = top + h1 / 2;
  chart.append(svg("line", { x1: left, y1: mid, x2: width - right, y2: mid, cls: "chart-axis" }));
  text(left - 4, top + 4, "+8", { "text-anchor": "end" });
  text(left - 4, top + h1, "−8", { "text-anchor": "end" });
  const base = top + h1 + gap + h2;
  chart.append(svg("line", { x1: left, y1: base, x2: width - right, y2: base, cls: "chart-axis" }));
  text(left - 4, top + h1 + gap + 10, fmt(maxW, 2), { "text-anchor": "end" });
  text(left - 4, base, "0", { "text-anchor": "end" });
  const event = W - d.event.lag;
  const dis = new Set(d.distractor_lags.map((lag) => W - lag));
  for (let i = 0; i < W; i += 1) {
    const kind = i === event ? "event" : dis.has(i) ? "distractor" : "small";
    const v = d.sizes[i] * d.signs[i];
    const hh = (Math.abs(v) / 8) * (h1 / 2);
    const bar = svg("rect", { x: x(i), y: v > 0 ? mid - hh : mid, width: Math.max(step - 0.3, 0.8),
      height: Math.max(hh, 0.5), cls: `far-bar ${kind}`, "data-lag": W - i });
    const tip = svg("title");
    tip.textContent = `lag ${W - i}: type ${d.types[i]}, size ${fmt(d.sizes[i], 2)}, sign ` +
      `${signText(d.signs[i])}${kind === "small" ? "" : ` — the ${kind}`}` +
      (kind === "event" ? "" : `; click to ${kind === "distractor" ? "remove this distractor"
        : "place a distractor here"}`);
    bar.append(tip);
    chart.append(bar);
    const wh = (d.weights[i] / maxW) * h2;
    const wbar = svg("rect", { x: x(i), y: base - wh, width: Math.max(step - 0.3, 0.8),
      height: Math.max(wh, 0), cls: `far-w ${kind}`, "data-testid": `far-w-${W - i}`,
      "data-value": d.weights[i] });
    const wtip = svg("title");
    wtip.textContent = `lag ${W - i}: weight ${fmt(d.weights[i])}`;
    wbar.append(wtip);
    chart.append(wbar);
  }
  for (const i of dis) {
    chart.append(svg("path", { d: `M${x(i) + step / 2},${base + 3} l-4,8 h8 z`,
      cls: "far-mark distractor" }));
  }
  const ex = x(event) + step / 2;
  chart.append(svg("path", { d: `M${ex},${base + 3} l-5,9 h10 z`, cls: "far-mark event" }));
  const anchor = ex < left + 60 ? "start" : ex > width - 60 ? "end" : "middle";
  text(ex, base + 24, `event, lag ${d.event.lag}`, { "text-anchor": anchor,
    "data-testid": "far-event-label" });
  for (const [lag, at] of [[W, "start"], [1, "end"]]) {
    text(x(W - lag) + (at === "end" ? step : 0), H - 2, `lag ${lag}`, { "text-anchor": at });
  }
  chart.addEventListener("click", (e) => {
    const lag = Number(e.target.dataset && e.target.dataset.lag);
    if (lag) toggleDistractor(lag);
  });
  return el("figure", { cls: "chart-box far-series" }, [chart, el("figcaption", {},
    "Top: each trade's size × sign (the event green, distractor blocks red; click a step to " +
    "place or remove a distractor). Below: the attention model's weight on each step.")]);
}

function toggleDistractor(lag) {
  if (!last || lag === last.event.lag) return;
  const now = new Set(last.distractor_lags);
  if (now.has(lag)) now.delete(lag); else now.add(lag);
  state.far.distractors = [...now].sort((a, b) => a - b);
  writeURL();
  show();
}

// -- each model's answer, here and at every lag ------------------------------------------------
function modelsTable(d) {
  const rows = KINDS.map((kind) => {
    const r = d.models[kind];
    return el("tr", {}, [el("th", {}, LABEL[kind]),
      el("td", { "data-testid": `far-pred-${kind}`, "data-value": r.prediction },
        signText(r.prediction)),
      el("td", { "data-testid": `far-p-${kind}`, "data-value": r.p_plus }, fmt(r.p_plus, 3)),
      el("td", { cls: r.correct ? "ok" : "bad", "data-testid": `far-right-${kind}` },
        r.correct ? "right" : "wrong")]);
  });
  return el("table", { cls: "matrix far-answers", "data-testid": "far-models" }, [
    el("caption", {}, `each model's answer with the event at lag ${d.event.lag}`),
    el("tr", {}, ["model", "answers", "P(+)", `truth ${signText(d.event.sign)}`]
      .map((t) => el("th", {}, t))),
    ...rows]);
}

/** P(the right answer) of each model with the event at every lag 1 … window (log scale), the
 * current lag marked. */
function sweepPlot(d, width) {
  const s = d.sweep;
  const W = d.window;
  const m = { l: 44, r: 10, t: 10, b: 40 };
  const H = 190;
  const lx = (lag) => m.l + (Math.log(lag) / Math.log(W)) * (width - m.l - m.r);
  const ly = (p) => m.t + (1 - p) * (H - m.t - m.b);
  const chart = svg("svg", { viewBox: `0 0 ${width} ${H}`, cls: "chart far-sweep", role: "img",
    "data-testid": "far-sweep", "aria-label": `each model's probability for the right answer ` +
      `with the event moved to each lag from 1 to ${W}` });
  const text = (tx, ty, str, attrs = {}) => {
    const node = svg("text", { x: tx, y: ty, cls: "chart-text", ...attrs });
    node.textContent = str;
    chart.append(node);
  };
  chart.append(svg("line", { x1: m.l, y1: H - m.b, x2: width - m.r, y2: H - m.b, cls: "chart-axis" }));
  chart.append(svg("line", { x1: m.l, y1: m.t, x2: m.l, y2: H - m.b, cls: "chart-axis" }));
  chart.append(svg("line", { x1: m.l, y1: ly(0.5), x2: width - m.r, y2: ly(0.5), cls: "chart-ref" }));
  for (const p of [0, 0.5, 1]) text(m.l - 4, ly(p) + 4, fmt(p, 1), { "text-anchor": "end" });
  const ticks = [1, 4, 16, 64, 256, 1024].filter((t) => t <= W);
  for (const t of ticks) {
    chart.append(svg("line", { x1: lx(t), y1: H - m.b, x2: lx(t), y2: H - m.b + 4, cls: "chart-axis" }));
    text(lx(t), H - m.b + 17, String(t), { "text-anchor": t === W ? "end" : t === 1 ? "start" : "middle" });
  }
  text((m.l + width - m.r) / 2, H - 4, "lag of the event (log scale)", { "text-anchor": "middle" });
  KINDS.forEach((kind, k) => {
    const pts = s.lags.map((lag, i) => {
      const p = s.models[kind].p_plus[i];
      return `${lx(lag)},${ly(s.truth[i] > 0 ? p : 1 - p)}`;
    });
    const line = svg("polyline", { points: pts.join(" "), cls: "chart-line",
      "data-testid": `far-sweep-${kind}` });
    line.style.stroke = PALETTE[k];
    styleLine(line, STYLE[kind]);
    chart.append(line);
  });
  const at = lx(d.event.lag);
  chart.append(svg("line", { x1: at, y1: m.t, x2: at, y2: H - m.b, cls: "far-now" }));
  const key = el("div", { cls: "legend-bar chart-key" }, KINDS.map((kind, k) => el("span", {},
    [patternSwatch({ ...STYLE[kind], marker: undefined }, PALETTE[k]), LABEL[kind]])));
  return el("figure", { cls: "chart-box" }, [chart, key, el("figcaption", {},
    "P(right answer) of each model with this series' event moved to each lag (above 0.5: " +
    "right); the grey line is the lag chosen now.")]);
}

/** What the sweep shows, per model: at how many lags it reads the event (right for both of
 * its signs), and the first lag where it does not. */
function sweepFacts(d, kind) {
  const reads = d.sweep.models[kind].reads;
  const miss = reads.indexOf(false);
  return { reads: reads.filter(Boolean).length, total: reads.length,
    firstMiss: miss < 0 ? null : d.sweep.lags[miss] };
}

/** Sentences written from the answer's numbers. */
function sentences(d) {
  const W = d.window;
  const nd = d.distractor_lags.length;
  const recent = d.distractor_lags.filter((lag) => lag < d.event.lag).length;
  const out = [];
  out.push(`The event is a type-0 block trade of size ${fmt(d.event.size, 2)} at lag ` +
    `${d.event.lag} (${plural(d.event.lag, "step")} before the end of the ${W}-step window), ` +
    `sign ${signText(d.event.sign)}: that sign is the answer. ` + (nd === 0
    ? "There are no distractor blocks."
    : `${plural(nd, "block trade")} of other types ${nd === 1 ? "is a distractor" : "are distractors"}` +
      (recent ? `, ${recent} of them more recent than the event.` : ", none more recent than the event.")));
  const a = d.attention;
  out.push(a.top_lag === d.event.lag
    ? `The attention model's largest weight, ${w3(a.weight_on_event)}, is on the event ` +
      `${plural(d.event.lag, "step")} back` + (nd ? `; all ${plural(nd, "distractor")} together get ` +
      `${w3(a.weight_on_distractors)} (the largest ${w3(a.max_distractor_weight)}).` : ".")
    : `The attention model's largest weight is at lag ${a.top_lag}, not on the event ` +
      `(${w3(a.weight_on_event)} there).`);
  const right = KINDS.filter((k) => d.models[k].correct).map((k) => LABEL[k]);
  const wrong = KINDS.filter((k) => !d.models[k].correct).map((k) => LABEL[k]);
  out.push(right.length === KINDS.length
    ? `At lag ${d.event.lag} all three models are right.`
    : `At lag ${d.event.lag}: right ${right.join(", ") || "none"}; wrong ${wrong.join(", ")}.`);
  const facts = KINDS.map((k) => {
    const f = sweepFacts(d, k);
    return `${LABEL[k]} at ${f.reads} of ${plural(f.total, "lag")}` +
      (f.firstMiss === null ? "" : ` (the first it misses: lag ${f.firstMiss})`);
  });
  out.push(`With this series' event moved to each lag from 1 to ${W}, a model reads it where ` +
    `it answers right for both of its signs: ${facts.join("; ")}.`);
  return out;
}

function render(d) {
  last = d;
  $("#far-trained").textContent = `${d.trained_lags[0]} to ${d.trained_lags[1]}`;
  $("#far-lag").max = String(d.window);
  $("#far-lag").value = String(d.event.lag);
  $("#far-lag").setAttribute("aria-valuetext", `lag ${d.event.lag}`);
  $("#far-lag-value").textContent = `lag ${d.event.lag}`;
  $("#far-sign").textContent = `flip the event's sign (now ${signText(d.event.sign)})`;
  $("#far-distractors").value = d.distractor_lags.slice().sort((a, b) => a - b).join(", ");
  const box = $("#far-result");
  const width = widthOf(box, 780);
  box.replaceChildren(
    modelsTable(d),
    sweepPlot(d, Math.min(width, 640)),
    seriesPlot(d, width),
    el("div", { "data-testid": "far-words" }, sentences(d).map((s) => el("p", {}, s))));
  renderTask(d);
  announce(sentences(d).slice(2).join(" "));
}

// -- the guided task ---------------------------------------------------------------------------
/** The task's answer from the sweep: the shortest lag where the recency average no longer
 * reads this series' event (wrong for its sign or for the flipped one; distractors as they
 * stand), or null if it reads it at every lag. */
export function recencyFirstMiss(d) {
  return sweepFacts(d, "recency").firstMiss;
}

/** The task's verdict on an answer: {done, text}. Done exactly when the event sits at the
 * shortest lag where the recency average no longer reads it. */
export function taskVerdict(d) {
  const target = recencyFirstMiss(d);
  const i = d.event.lag - 1;
  const s = d.sweep.models.recency;
  const other = signText(-d.event.sign);
  const said = (p) => `${signText(p > 0.5 ? 1 : -1)} (P(+) = ${fmt(p, 3)})`;
  const now = `At lag ${d.event.lag} the recency average answers ${said(s.p_plus[i])} for the ` +
    `event's sign ${signText(d.event.sign)}, and ${said(s.p_plus_flipped[i])} had it been ` +
    `${other}`;
  if (target === null) {
    return { done: false, text: `${now}. It reads this event at every lag: there is no lag to ` +
      "find here. Try a new series, or place distractors." };
  }
  if (d.event.lag === target) {
    const still = KINDS.filter((k) => k !== "recency" && d.sweep.models[k].reads[i])
      .map((k) => LABEL[k]);
    return { done: true, text: `✓ ${now}: lag ${target} is the shortest lag where it no longer ` +
      "reads the event" + (target > 1 ? ` (it read it at every lag from 1 to ${target - 1})`
      : "") + ". " + (still.length ? `Here ${still.join(" and ")} still ` +
        `${still.length === 1 ? "reads" : "read"} it.` : "Here the other two miss it as well.") };
  }
  // the hint comes from the same oracle as the ✓: which way from here reaches the target lag
  const here = s.reads[i] ? "It still reads the event here" : "It misses the event here";
  return { done: false, text: `Not yet. ${now}. ` + (taskHint(d) === "further"
    ? `${here}, and it reads it at every shorter lag too: move the event further back ` +
      `(towards lag ${d.window}).`
    : `${here}, but it already missed it at a shorter lag: move the event nearer (towards ` +
      "lag 1).") };
}

/** Which way the event must move to reach the task's answer: "further" (a longer lag),
 * "nearer" (a shorter one), or null on the answer or where there is none. From the same
 * oracle as the ✓ (recencyFirstMiss), so following it always reaches the ✓. */
export function taskHint(d) {
  const target = recencyFirstMiss(d);
  if (target === null || d.event.lag === target) return null;
  return d.event.lag < target ? "further" : "nearer";
}

function renderTask(d) {
  const box = $('[data-testid="task-far"]');
  const { done, text } = taskVerdict(d);
  box.classList.toggle("done", done);
  box.textContent = text;
}

// -- the shipped run: accuracy by lag, where each falls to chance, reach in training ----------
const chanceWords = (run) => (run.chance_from === null
  ? "never at chance within the window"
  : `at chance from lag ${lagsText(run.chance_from)}`);

/** The first training step from which no lag bucket was at chance (null: never). */
export function reachStep(progress) {
  let step = null;
  for (let i = progress.steps.length - 1; i >= 0; i -= 1) {
    if (progress.chance_from[i] !== null) break;
    step = progress.steps[i];
  }
  return step;
}

const SHORT = { attention: "attention", recency: "recency", gru: "GRU" };
const CHART_LEFT = 62;

/** Does a mark's label at lag x fit inside a log-lag chart of this width? (lineChart puts it
 * right of the line in the first 70% of the plot, left of it after; 13 px text, at most
 * 0.62 em a character.) */
function markFits(x, label, window, width) {
  const plot = width - CHART_LEFT - 14;
  const at = CHART_LEFT + (Math.log10(x) / Math.log10(window)) * plot;
  const room = at > CHART_LEFT + 0.7 * plot ? at - 4 - CHART_LEFT : width - 14 - at - 4;
  return label.length * 13 * 0.62 <= room;
}

function curvesChart(c, width) {
  const buckets = c.models.attention.by_lag;
  const mid = (b) => Math.sqrt(b.lags[0] * b.lags[1]);
  const ticks = [1, 4, 16, 64, 256, 1024].filter((t) => t <= c.window);
  return lineChart({
    testid: "far-curves", width, height: 260, left: CHART_LEFT,
    label: `held-out accuracy by lag of the four models, ${c.per_bucket} series per lag bucket`,
    x: { label: "lag of the event (log scale)", log: true, domain: [1, c.window], ticks,
      format: (v) => String(v) },
    y: { label: "accuracy", domain: [0.3, 1], ticks: [0.5, 0.75, 1], format: (v) => fmt(v, 2) },
    refY: { value: 0.5, label: "chance" },
    // each model's chance bucket, labelled where the label fits (the legend names them all)
    marks: CURVE_KINDS.filter((k) => c.models[k].chance_from !== null).map((k, _, all) => {
      const x = c.models[k].chance_from[0];
      const label = `${SHORT[k]} at chance`;
      const alone = all.filter((j) => c.models[j].chance_from[0] === x).length === 1;
      return { x, label: alone && markFits(x, label, c.window, width) ? label : "" };
    }),
    series: CURVE_KINDS.map((kind, k) => ({
      name: `${LABEL[kind]}: ${chanceWords(c.models[kind])}`, color: PALETTE[k], ...STYLE[kind],
      points: c.models[kind].by_lag.map((b) => ({ x: mid(b), y: b.accuracy,
        title: `${LABEL[kind]}, lag ${lagsText(b.lags)}: ${b.correct} of ${b.cases} right, ` +
          `${fmt(b.accuracy, 3)} (95% interval ${fmt(b.interval[0], 3)}–${fmt(b.interval[1], 3)})` })) })),
  });
  // (buckets drawn at their geometric middle on the log axis)
}

function curvesTable(c) {
  const buckets = c.models.attention.by_lag;
  return el("div", { cls: "scroll", tabindex: 0, role: "region",
    "aria-label": "held-out accuracy by lag, a table" }, [
    el("table", { cls: "matrix", "data-testid": "far-curves-table" }, [
      el("caption", {}, `held-out accuracy per lag bucket (${c.per_bucket} series each)`),
      el("tr", {}, [el("th", {}, "lag"), ...CURVE_KINDS.map((k) => el("th", {}, LABEL[k]))]),
      ...buckets.map((b, i) => el("tr", {}, [el("th", {}, lagsText(b.lags)),
        ...CURVE_KINDS.map((k) => {
          const r = c.models[k].by_lag[i];
          const chance = r.interval[0] <= 0.5 && 0.5 <= r.interval[1];
          return el("td", { "data-testid": `far-acc-${k}-${i}`, "data-value": r.accuracy,
            cls: chance ? "far-chance" : null,
            title: `95% interval ${fmt(r.interval[0], 3)}–${fmt(r.interval[1], 3)}` },
          fmt(r.accuracy, 3) + (chance ? " ~" : ""));
        })])),
      el("tr", {}, [el("th", {}, "all"), ...CURVE_KINDS.map((k) => el("td", {
        "data-testid": `far-acc-${k}`, "data-value": c.models[k].accuracy },
      fmt(c.models[k].accuracy, 3)))]),
    ])]);
}

function curvesWords(c) {
  const out = [];
  const first = (k) => c.models[k].by_lag[0];
  out.push(`With the event at lag ${lagsText(first("attention").lags)}: ` + CURVE_KINDS.map((k) =>
    `${LABEL[k]} ${fmt(first(k).accuracy, 3)}`).join(", ") + ` (${c.per_bucket} held-out series).`);
  const said = CURVE_KINDS.map((k) => {
    const run = c.models[k];
    if (run.chance_from === null) {
      const low = run.by_lag.reduce((a, b) => (b.accuracy < a.accuracy ? b : a));
      return `${LABEL[k]} is never at chance (its lowest bucket, lag ${lagsText(low.lags)}, ` +
        `${fmt(low.accuracy, 3)})`;
    }
    const b = run.by_lag.find((r) => r.lags[0] === run.chance_from[0]);
    return `${LABEL[k]} falls to chance from lag ${lagsText(b.lags)} (${fmt(b.accuracy, 3)}, ` +
      `95% interval ${fmt(b.interval[0], 3)}–${fmt(b.interval[1], 3)} holds 0.5)`;
  }).join("; ");
  out.push(`${said[0].toUpperCase()}${said.slice(1)}. A bucket marked ~ is one whose 95% ` +
    "interval holds 0.5: a coin flip.");
  out.push(`The attention model's largest weight is on the event in ${fmt(c.top_weight_on_event, 3)} ` +
    `of the ${c.held_out.toLocaleString("en")} held-out series (mean weight there ` +
    `${fmt(c.mean_weight_on_event, 3)}).`);
  return out;
}

function progressWords(c) {
  const out = [];
  for (const k of CURVE_KINDS) {
    const p = c.models[k].progress;
    const reach = reachStep(p);
    const early = p.chance_from[0];
    out.push(`${LABEL[k]}: at step ${p.steps[0]}, ` + (early === null ? "at no lag at chance"
      : `at chance from lag ${lagsText(early)}`) + "; " + (reach === null
      ? `still at chance somewhere at step ${p.steps[p.steps.length - 1]}`
      : `at no lag at chance from step ${reach} on`) + ".");
  }
  return out;
}

function tunedWords(c) {
  const t = c.gru_tuned;
  const g = c.models.gru;
  const tr = reachStep(t.progress);
  const gr = reachStep(g.progress);
  const reach = (s) => (s === null ? "never at every lag" : `at every lag by step ${s}`);
  return `The tuned GRU (update-gate bias +${t.gate_bias} at initialisation, so it starts out ` +
    `keeping its state): ${t.parameters.toLocaleString("en")} parameters, ${t.steps} steps, ` +
    `${fmt(t.train_seconds, 1)} s of training on a busy 2-core machine; ${fmt(t.accuracy, 3)} over ` +
    `all lags, ${chanceWords(t)}, ${reach(tr)}. The GRU as shipped (bias 0): ` +
    `${g.parameters.toLocaleString("en")} parameters, ${g.steps} steps, ${fmt(g.train_seconds, 1)} s; ` +
    `${fmt(g.accuracy, 3)}, ${reach(gr)}. Attention: ${c.models.attention.parameters.toLocaleString("en")} ` +
    `parameters, ${fmt(c.models.attention.train_seconds, 1)} s, ${reach(reachStep(c.models.attention.progress))}.`;
}

/** The plain RNN's fade beside the GRU, and the gates' price, from the shipped runs. */
export function gatesWords(c) {
  const { rnn, gru, attention: att } = c.models;
  const near = rnn.by_lag[0];
  const far = rnn.by_lag[rnn.by_lag.length - 1];
  const gruFar = gru.by_lag[gru.by_lag.length - 1];
  // the first bucket from which the RNN's interval lies wholly below the GRU's there
  const behind = rnn.by_lag.findIndex((r, i) => r.interval[1] < gru.by_lag[i].interval[0]);
  const fade = rnn.by_lag.map((r) => `${fmt(r.accuracy, 3)} at ${lagsText(r.lags)}`).join(", ");
  const out = [];
  out.push(`The plain RNN (tanh, no gates: ${rnn.units} units, ${rnn.parameters.toLocaleString("en")} ` +
    `parameters) is trained as the GRU was, on the same batches. Its accuracy by lag: ${fade}. ` +
    (far.accuracy < near.accuracy
      ? `Its memory of the event fades with distance: ${fmt(near.accuracy - far.accuracy, 3)} lower at ` +
        `lags ${lagsText(far.lags)} than at lag ${lagsText(near.lags)}, ${chanceWords(rnn)}.`
      : `It does not fade here: ${fmt(far.accuracy, 3)} at lags ${lagsText(far.lags)}.`));
  out.push(`What the gates buy: the GRU, on the same budget (${gru.parameters.toLocaleString("en")} ` +
    `parameters), holds the event — ${fmt(gruFar.accuracy, 3)} at lags ${lagsText(gruFar.lags)} where ` +
    `the plain RNN has ${fmt(far.accuracy, 3)}` + (behind < 0 ? "." : `; from lag ` +
    `${lagsText(rnn.by_lag[behind].lags)} on, the RNN's 95% interval lies below the GRU's.`) +
    " Its update gate lets a unit keep its state unchanged across steps; the RNN rewrites every " +
    "unit through tanh at every step.");
  const gr = reachStep(gru.progress);
  const ar = reachStep(att.progress);
  const reach = (s) => (s === null ? "never at every lag" : `at every lag by step ${s}`);
  out.push(`What they cost: three sets of weights per unit (reset gate, update gate, candidate), so ` +
    `the budget buys the GRU ${gru.units} units where the plain RNN has ${rnn.units}. And, like every ` +
    `recurrent net, it reads a series in order: ${c.window} steps, each waiting for the one before, ` +
    `where attention compares its query with all ${c.window} steps at once. In training, ${gru.steps} ` +
    `steps each: the GRU was ${reach(gr)}, attention ${reach(ar)}; they took ` +
    `${fmt(gru.train_seconds, 1)} s and ${fmt(att.train_seconds, 1)} s on a busy 2-core machine ` +
    `(the plain RNN ${fmt(rnn.train_seconds, 1)} s) — ` +
    (gru.train_seconds < att.train_seconds
      ? "on this CPU the GRU's loop was not the slower one; its price is the order, not these seconds."
      : `the GRU ${fmt(gru.train_seconds / att.train_seconds, 1)}× attention's time.`));
  return out;
}

function renderCurves(c) {
  lastCurves = c;
  const box = $("#far-curves");
  const width = widthOf(box, 640);
  box.replaceChildren(
    el("h4", {}, `Accuracy by lag on ${c.held_out.toLocaleString("en")} held-out series, and ` +
      "where each model falls to chance"),
    curvesChart(c, width),
    el("div", { "data-testid": "far-curves-words" }, curvesWords(c).map((s) => el("p", {}, s))),
    curvesTable(c),
    el("h4", {}, "How each model's reach grew in training"),
    el("ul", { "data-testid": "far-progress" }, progressWords(c).map((s) => el("li", {}, s))),
    el("p", { "data-testid": "far-tuned" }, tunedWords(c)),
    el("h4", {}, "What the GRU's gates buy, and what they cost"),
    el("div", { "data-testid": "far-gates" }, gatesWords(c).map((s) => el("p", {}, s))),
    el("p", { cls: "note" }, ["From the run ", el("code", {}, c.command), "; the plain RNN's ",
      el("code", {}, c.rnn_command), "."]));
}

// -- controls ---------------------------------------------------------------------------------
/** The distractor lags typed, or a sentence in the learner's words saying what to change. */
export function parseDistractors(text, window, eventLag) {
  const parts = text.trim() === "" ? [] : text.trim().split(/[\s,;]+/);
  const bad = parts.filter((p) => !/^\d+$/.test(p) || Number(p) < 1 || Number(p) > window);
  if (bad.length) {
    return { error: `Distractor lags: "${bad[0]}" is not a lag. Type whole numbers from 1 (the ` +
      `last step) to ${window} (the oldest), separated by commas.` };
  }
  const lags = parts.map(Number);
  if (lags.includes(eventLag)) {
    return { error: `Distractor lags: ${eventLag} is the event's lag; a distractor must be at ` +
      "another step." };
  }
  if (new Set(lags).size !== lags.length) {
    return { error: "Distractor lags: each lag may be typed once." };
  }
  if (lags.length > MAX_DISTRACTORS) {
    return { error: `Distractor lags: at most ${MAX_DISTRACTORS} lags, got ${lags.length}.` };
  }
  return { lags: lags.sort((a, b) => a - b) };
}

export function mount(section) {
  root = section;
  const again = () => { clearError(name); writeURL(); show(); };
  $("#far-new").addEventListener("click", () => {
    Object.assign(state.far, { seed: Math.min(state.far.seed + 1, MAX_SEED), lag: 0, sign: 0,
      distractors: null });
    again();
  });
  $("#far-seed").addEventListener("change", () => {
    const text = $("#far-seed").value.trim();
    const v = Number(text);
    if (!/^\d+$/.test(text) || v > MAX_SEED) {
      showError(name, new Error(`Series seed: type a whole number from 0 to ${MAX_SEED}.`));
      return;
    }
    Object.assign(state.far, { seed: v, lag: 0, sign: 0, distractors: null });
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
    const window = last ? last.window : 256;
    const lag = last ? last.event.lag : state.far.lag;
    const got = parseDistractors($("#far-distractors").value, window, lag);
    if (got.error) {
      showError(name, new Error(got.error));
      return;
    }
    state.far.distractors = got.lags;
    again();
  });
  $("#far-none").addEventListener("click", () => { state.far.distractors = []; again(); });
  $("#far-lag1").addEventListener("click", () => {
    Object.assign(state.far, { lag: 1, distractors: [] });
    again();
  });
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
  let pending = 0;
  window.addEventListener("resize", () => { // redraw the charts at the new width
    clearTimeout(pending);
    pending = setTimeout(() => {
      if (root.hidden) return;
      if (last) render(last);
      if (lastCurves) renderCurves(lastCurves);
    }, 150);
  });
}

export function sync() {}

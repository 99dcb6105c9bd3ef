// View 3 · Scale: why divide by √d_k. The seed's scores [8, 0] grown or shrunk with d_k, their
// softmax with and without the scale, the gradient left for each key, and random vectors whose
// dot products spread like √d_k — all from qkv.explain (POST /api/scale).
import { ApiError, Channel } from "../core/api.js";
import { announce, el, fmt, parseVector, scrollBox } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { state, writeURL } from "../core/state.js";

export const name = "scale";
export const READS = {
  "/api/scale": ["example.scores", "example.reference_d_k", "example.raw_scores",
    "example.scale", "example.d_k", "example.temperature", "example.scaled", "example.weights",
    "example.unscaled_weights", "example.gradient", "example.unscaled_gradient",
    "example.heading", "example.summary",
    "random.d_k", "random.n_queries", "random.n_keys", "random.raw_std", "random.scaled_std",
    "random.sqrt_d_k", "random.raw_mean_max_weight", "random.scaled_mean_max_weight",
    "random.raw_weights", "random.scaled_weights"],
};

let root;
const $ = (sel) => root.querySelector(sel);

// the sliders are logarithmic: d_k from 1 to 1024, τ from 0.1 to 10
const dkFromSlider = (p) => Math.max(1, Math.round(2 ** (p / 10)));
const sliderFromDk = (dk) => Math.round(10 * Math.log2(Math.max(1, dk)));
const tauFromSlider = (p) => Number((10 ** (p / 100)).toPrecision(3));
const sliderFromTau = (tau) => Math.round(100 * Math.log10(tau > 0 ? tau : 1));

const channel = new Channel(name, "/api/scale", render);

const SCORES_PROBLEM = "scores: write numbers separated by commas, e.g. 8, 0";

export function show() {
  // scores typed wrong keep their error (and no answer for other inputs) until fixed
  if ($("#scale-scores").classList.contains("bad")) {
    showError(name, new ApiError(0, SCORES_PROBLEM));
    return;
  }
  channel.send({ scores: state.scores, d_k: state.dk, temperature: state.tau, seed: 0,
    n_keys: 16 });
}

/** One horizontal bar per weight, labelled, its value in data-value. */
function bars(testName, weights, labels) {
  const box = el("div", { cls: "bars", "data-testid": `bars-${testName}` });
  weights.forEach((w, j) => {
    const bar = el("div", { cls: "bar" });
    bar.style.width = `${(100 * w).toFixed(2)}%`;
    box.append(el("div", { cls: "bar-row" }, [
      el("span", { cls: "bar-label" }, labels[j]),
      el("div", { cls: "bar-track" }, [bar]),
      el("span", { cls: "bar-value", "data-testid": `${testName}-${j}`, "data-value": w }, fmt(w)),
    ]));
  });
  return box;
}

function render(data) {
  const ex = data.example;
  const r = data.random;
  $("#scale-value").textContent = fmt(ex.scale);
  $("#scale-value").dataset.value = ex.scale;
  const labels = ex.raw_scores.map((s) => `score ${fmt(s, 2)}`);
  const table = el("table", { cls: "matrix" }, [
    el("tr", {}, [el("th"), ...ex.scores.map((_, j) => el("th", {}, `key ${j}`))]),
    el("tr", {}, [el("th", {}, `score at d_k = ${ex.reference_d_k}`),
      ...ex.scores.map((s) => el("td", {}, fmt(s)))]),
    el("tr", {}, [el("th", {}, `score at d_k = ${ex.d_k} (× √(${ex.d_k}/${ex.reference_d_k}))`),
      ...ex.raw_scores.map((s, j) =>
        el("td", { "data-testid": `example-raw-${j}`, "data-value": s }, fmt(s)))]),
    el("tr", {}, [el("th", {}, "score × scale"), ...ex.scaled.map((s, j) =>
      el("td", { "data-testid": `example-scaled-${j}`, "data-value": s }, fmt(s)))]),
  ]);
  const gradRow = (testName, grads) => el("p", { cls: "grad" }, [
    "gradient reaching each score, ∂w_j/∂score_j = w_j(1 − w_j): ",
    ...grads.flatMap((g, j) => [j ? ", " : "", el("b", { "data-testid": `${testName}-${j}`,
      "data-value": g }, g === 0 ? "0" : g < 1e-3 ? g.toExponential(1) : fmt(g))]),
  ]);
  $("#scale-example").replaceChildren(
    el("h3", { "data-testid": "scale-heading" }, ex.heading),
    scrollBox([table], "the scores"),
    el("h4", {}, `divided by τ·√d_k (scale 1/(${ex.temperature}·√${ex.d_k}))`),
    bars("example-weight", ex.weights, labels),
    gradRow("example-grad", ex.gradient),
    el("h4", {}, ex.temperature === 1 ? "not divided (scale 1)" : `not divided by √d_k (scale 1/τ)`),
    bars("example-unscaled-weight", ex.unscaled_weights, labels),
    gradRow("example-unscaled-grad", ex.unscaled_gradient),
    el("p", { cls: "note", "data-testid": "scale-summary" }, ex.summary),
  );
  last = ex;
  renderTask(ex);
  if (answered) checkWhy(); // the check's words follow the numbers now on screen
  announce(`d_k ${ex.d_k}: scaled weights ${ex.weights.map((w) => fmt(w, 3)).join(", ")}; ` +
    `unscaled ${ex.unscaled_weights.map((w) => fmt(w, 4)).join(", ")}`);
  const keyLabels = r.raw_weights.map((_, j) => `k${j}`);
  const stat = (testid, value) => el("b", { "data-testid": testid, "data-value": value },
    fmt(value, 3));
  $("#scale-random").replaceChildren(
    el("h3", {}, `random vectors: ${r.n_queries} queries × ${r.n_keys} keys, d_k = ${r.d_k}, entries ~ N(0, 1)`),
    el("p", {}, ["std of q · k/τ: ", stat("random-raw-std", r.raw_std), " (√d_k = ",
      stat("random-sqrt-dk", r.sqrt_d_k), "); after × 1/(τ·√d_k): ",
      stat("random-scaled-std", r.scaled_std)]),
    el("p", {}, ["mean largest weight: ", stat("random-raw-max", r.raw_mean_max_weight),
      " unscaled, ", stat("random-scaled-max", r.scaled_mean_max_weight), " scaled"]),
    el("h4", {}, "query 0's weights, unscaled (q · k/τ)"),
    bars("random-raw-weight", r.raw_weights, keyLabels),
    el("h4", {}, "query 0's weights, scaled (q · k/(τ·√d_k))"),
    bars("random-scaled-weight", r.scaled_weights, keyLabels),
  );
}

// -- the guided task and the check -------------------------------------------------------------
let last = null; // the last answer's example, for the check
let answered = false; // the learner has checked an answer: re-check it with each answer
const TASK_SHARE = 0.01; // the task: the lower key's unscaled weight below 1%
const pct = (w) => (w === 0 ? "0% (too small for float64)"
  : w < 1e-4 ? `${(100 * w).toExponential(1)}%` : `${(100 * w).toFixed(2)}%`);
const lowest = (ws) => ws.reduce((b, x, j) => (x < ws[b] ? j : b), 0);

// the d_k values the slider can take, and what each answer showed for the lower key's
// unscaled weight, per scores and τ (so "the smallest d_k" is judged from seen answers)
const SLIDER_DKS = [...new Set(Array.from({ length: 101 }, (_, p) => dkFromSlider(p)))];
const seen = new Map();

/** "Find the smallest d_k where the unscaled softmax gives the lower key < 1%": judged from
 * this answer and the one for the slider's next lower d_k, if it has been seen. */
function renderTask(ex) {
  const box = $('[data-testid="task-dk"]');
  const j = lowest(ex.unscaled_weights);
  const uw = ex.unscaled_weights[j];
  const key = `${ex.scores.join(",")}|${ex.temperature}`;
  if (!seen.has(key)) seen.set(key, new Map());
  const shares = seen.get(key);
  shares.set(ex.d_k, uw);
  const below = SLIDER_DKS.filter((d) => d < ex.d_k);
  const prev = below.length ? below[below.length - 1] : null;
  const done = uw < TASK_SHARE && (prev === null || (shares.has(prev) && shares.get(prev) >= TASK_SHARE));
  box.classList.toggle("done", done);
  const here = `at d_k = ${ex.d_k}, unscaled, key ${j} gets ${pct(uw)}`;
  if (done) {
    box.textContent = `✓ d_k = ${ex.d_k} is the smallest: ${here} (< 1%)` +
      (prev === null ? "" : `, at d_k = ${prev} it got ${pct(shares.get(prev))}`) +
      `. Divided by √d_k it keeps ${pct(ex.weights[j])}.`;
  } else if (uw < TASK_SHARE) {
    box.textContent = shares.has(prev)
      ? `Go lower: ${here}, and at d_k = ${prev} it got ${pct(shares.get(prev))}, also below 1%.`
      : `Close: ${here} (< 1%). Is ${ex.d_k} the smallest such d_k? Move d_k one step down.`;
  } else if (Math.max(...ex.scores) === Math.min(...ex.scores)) {
    box.textContent = "Equal scores stay equal at every d_k: type scores that differ.";
  } else {
    box.textContent = `Not yet: ${here}. Raise d_k: the raw scores grow like √d_k.`;
  }
}

/** "Check yourself" 2: the chosen reason, checked against the numbers on screen. */
function checkWhy() {
  const box = $('[data-testid="check-why"]');
  const picked = root.querySelector('input[name="check-why"]:checked');
  box.classList.remove("done");
  if (!picked) {
    box.textContent = "Pick an answer first.";
    return;
  }
  if (!last) {
    box.textContent = "No numbers yet: wait for the view to load.";
    return;
  }
  const ex = last;
  const j = lowest(ex.unscaled_weights);
  const maxU = Math.max(...ex.unscaled_weights);
  const maxS = Math.max(...ex.weights);
  const evidence = `At d_k = ${ex.d_k}: unscaled, the largest weight is ${fmt(maxU, 4)} and ` +
    `key ${j}'s gradient ${fmt(ex.unscaled_gradient[j], 4)}; divided by √d_k, ` +
    `${fmt(maxS, 4)} and ${fmt(ex.gradient[j], 4)}.`;
  if (picked.value === "range") {
    if (maxU > maxS) {
      box.classList.add("done");
      box.textContent = `✓ Right. ${evidence} The scale keeps the softmax from turning into ` +
        "a hard argmax, so every key still gets gradient.";
    } else {
      box.textContent = `That is the reason, but these numbers do not show it: ${evidence} ` +
        "Raise d_k (with τ = 1) and check again.";
    }
  } else if (picked.value === "normalise") {
    const sum = ex.unscaled_weights.reduce((a, b) => a + b, 0);
    box.textContent = `Not that: softmax already makes each row sum to 1 — the unscaled ` +
      `weights here sum to ${fmt(sum, 4)} too. ${evidence}`;
  } else {
    box.textContent = `Not that: each score still costs d_k = ${ex.d_k} multiply-adds; the ` +
      `scale adds one multiplication. ${evidence}`;
  }
}

export function sync() {
  $("#dk-slider").value = sliderFromDk(state.dk);
  $("#dk-value").textContent = `${state.dk}  (√d_k = ${fmt(Math.sqrt(state.dk), 3)})`;
  $("#tau-slider").value = sliderFromTau(state.tau);
  $("#tau-value").textContent = String(state.tau);
  if (document.activeElement !== $("#scale-scores")) {
    $("#scale-scores").value = state.scores.join(", ");
    $("#scale-scores").classList.remove("bad");
  }
}

export function mount(section) {
  root = section;
  $("#dk-slider").addEventListener("input", () => {
    state.dk = dkFromSlider(Number($("#dk-slider").value));
    sync();
    writeURL();
    show();
  });
  $("#tau-slider").addEventListener("input", () => {
    state.tau = tauFromSlider(Number($("#tau-slider").value));
    sync();
    writeURL();
    show();
  });
  $("#scale-scores").addEventListener("input", () => {
    const parsed = parseVector($("#scale-scores").value);
    $("#scale-scores").classList.toggle("bad", !parsed);
    if (!parsed) {
      showError(name, new ApiError(0, SCORES_PROBLEM));
      return;
    }
    state.scores = parsed;
    writeURL();
    show();
  });
  $("#check-why-run").addEventListener("click", () => {
    answered = true;
    checkWhy();
  });
}

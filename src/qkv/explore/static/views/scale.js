// View 3 · Scale: why divide by √d_k. The lesson's scores [8, 0] grown or shrunk with d_k, their
// softmax with and without the scale, the gradient left for each key, and random vectors whose
// dot products spread like √d_k — all from qkv.explain (POST /api/scale).
import { ApiError, Channel } from "../core/api.js";
import { announce, el, fmt, parseVector, plural, readNumber, scrollBox } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { state, writeURL } from "../core/state.js";

export const name = "scale";
export const READS = {
  "/api/scale": ["example.scores", "example.reference_d_k", "example.raw_scores",
    "example.scale", "example.d_k", "example.temperature", "example.scaled", "example.weights",
    "example.unscaled_weights", "example.gradient", "example.unscaled_gradient",
    "example.heading", "example.summary", "example.task.share", "example.task.max_d_k",
    "example.task.smallest_d_k", "example.task.weight_at_max", "example.task.previous_weight",
    "example.hard.key", "example.hard.unscaled", "example.hard.scaled",
    "random.d_k", "random.n_queries", "random.n_keys", "random.raw_std", "random.scaled_std",
    "random.sqrt_d_k", "random.raw_mean_max_weight", "random.scaled_mean_max_weight",
    "random.raw_weights", "random.scaled_weights", "random.raw_max_weights", "random.query"],
};

// the controls by the request fields they fill, so a server's complaint names the control
export const LABELS = { scores: "scores at d_k = 64", d_k: "d_k", temperature: "temperature τ" };

let root;
const $ = (sel) => root.querySelector(sel);

// the sliders are logarithmic: d_k from 1 to 1024, τ from 0.1 to 10
const dkFromSlider = (p) => Math.max(1, Math.round(2 ** (p / 10)));
const sliderFromDk = (dk) => Math.round(10 * Math.log2(Math.max(1, dk)));
const tauFromSlider = (p) => Number((10 ** (p / 100)).toPrecision(3));
const sliderFromTau = (tau) => Math.round(100 * Math.log10(tau > 0 ? tau : 1));

const channel = new Channel(name, "/api/scale", render);
const MAX_DK = 1024; // the server's MAX_SCALE_DK: the slider's end and the task's domain

const SCORES_PROBLEM = "scores at d_k = 64: write numbers separated by commas, e.g. 8, 0";

export function show() {
  // scores typed wrong keep their error (and no answer for other inputs) until fixed
  if ($("#scale-scores").classList.contains("bad")) {
    showError(name, new ApiError(0, SCORES_PROBLEM));
    return;
  }
  if ($("#dk-input").classList.contains("bad")) {
    showError(name, new ApiError(0, readNumber($("#dk-input"), "d_k", DK_PROBLEM).problem));
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
      "data-value": g }, small(g))]),
    gradientsSaid(grads),
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
  const peaks = r.raw_max_weights;
  const stat = (testid, value) => el("b", { "data-testid": testid, "data-value": value },
    fmt(value, 3));
  $("#scale-random").replaceChildren(
    el("h3", {}, `random vectors: ${r.n_queries} queries × ${r.n_keys} keys, d_k = ${r.d_k}, entries ~ N(0, 1)`),
    el("p", {}, ["std of q · k/τ: ", stat("random-raw-std", r.raw_std), " (√d_k = ",
      stat("random-sqrt-dk", r.sqrt_d_k), "); after × 1/(τ·√d_k): ",
      stat("random-scaled-std", r.scaled_std)]),
    el("p", {}, ["mean largest weight: ", stat("random-raw-max", r.raw_mean_max_weight),
      " unscaled, ", stat("random-scaled-max", r.scaled_mean_max_weight), " scaled"]),
    el("p", { cls: "note", "data-testid": "random-peaks" },
      `Each query's largest unscaled weight, from ${fmt(Math.min(...peaks), 3)} to ` +
      `${fmt(Math.max(...peaks), 3)}; their mean over the ${plural(r.n_queries, "query", "queries")} ` +
      `is ${fmt(r.raw_mean_max_weight, 3)}. Shown below: query ${r.query}, whose largest ` +
      `unscaled weight ${fmt(peaks[r.query], 3)} is the nearest to that mean.`),
    el("h4", {}, `query ${r.query}'s weights, unscaled (q · k/τ)`),
    bars("random-raw-weight", r.raw_weights, keyLabels),
    el("h4", {}, `query ${r.query}'s weights, scaled (q · k/(τ·√d_k))`),
    bars("random-scaled-weight", r.scaled_weights, keyLabels),
  );
}

// -- the guided task and the check -------------------------------------------------------------
let last = null; // the last answer's example, for the check
let answered = false; // the learner has checked an answer: re-check it with each answer
const pct = (w) => (w === 0 ? "0% (too small for float64)"
  : w < 1e-4 ? `${(100 * w).toExponential(1)}%` : `${(100 * w).toFixed(2)}%`);
const lowest = (ws) => ws.reduce((b, x, j) => (x < ws[b] ? j : b), 0);
/** A gradient as written: 0, 1.8e-35 below 0.001, else 4 decimals. */
const small = (g) => (g === 0 ? "0" : g < 1e-3 ? g.toExponential(1) : fmt(g));

/** Gradients that are equal say so (two keys: w₀(1 − w₀) = w₀w₁ = w₁(1 − w₁)). */
function gradientsSaid(grads) {
  if (grads.length < 2 || !grads.every((g) => g === grads[0])) return "";
  return grads.length === 2 ? " (the two are equal: with two keys, w₀(1 − w₀) = w₀·w₁ = w₁(1 − w₁))"
    : ` (all ${grads.length} are equal)`;
}

/** "Find the smallest d_k where the unscaled softmax gives the lower key < 1%": the server
 * answers it over every d_k from 1 to the slider's end (example.task); the ✓ is that answer. */
function renderTask(ex) {
  const box = $('[data-testid="task-dk"]');
  const t = ex.task;
  const j = lowest(ex.unscaled_weights);
  const uw = ex.unscaled_weights[j];
  const done = t.smallest_d_k === ex.d_k;
  box.classList.toggle("done", done);
  const share = `${Math.round(100 * t.share)}%`;
  const here = `at d_k = ${ex.d_k}, unscaled, key ${j} gets ${pct(uw)}`;
  const before = t.previous_weight === null ? ""
    : `, at d_k = ${ex.d_k - 1} it got ${pct(t.previous_weight)}`;
  if (done) {
    box.textContent = `✓ d_k = ${ex.d_k} is the smallest: ${here} (< ${share})${before}. ` +
      `Divided by √d_k it keeps ${pct(ex.weights[j])}.`;
  } else if (Math.max(...ex.scores) === Math.min(...ex.scores)) {
    box.textContent = "Equal scores stay equal at every d_k: type scores that differ.";
  } else if (t.smallest_d_k === null) {
    box.textContent = `No d_k from 1 to ${t.max_d_k} gets there: ${here}, and even at ` +
      `d_k = ${t.max_d_k} it gets ${pct(t.weight_at_max)}. Type scores further apart or ` +
      "lower τ.";
  } else if (uw < t.share) {
    box.textContent = `Go lower: ${here}${before}, also below ${share}.`;
  } else {
    box.textContent = `Not yet: ${here}. Raise d_k: the raw scores grow like √d_k.`;
  }
}

/** "Check yourself" 2: the chosen reason, checked against the numbers on screen. The ✓ needs
 * the right reason and numbers that show it: unscaled a hard argmax (the key falling behind
 * keeps a gradient below example.hard.vanished), divided by √d_k not. */
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
  const j = ex.hard.key;
  const maxU = Math.max(...ex.unscaled_weights);
  const maxS = Math.max(...ex.weights);
  const evidence = `At d_k = ${ex.d_k}${ex.temperature === 1 ? "" : `, τ = ${ex.temperature}`}: ` +
    `unscaled, the largest weight is ${fmt(maxU, 4)} and key ${j}'s gradient ` +
    `${small(ex.unscaled_gradient[j])}; divided by √d_k, ${fmt(maxS, 4)} and ` +
    `${small(ex.gradient[j])}.`;
  if (picked.value === "range") {
    if (ex.hard.unscaled && !ex.hard.scaled) {
      box.classList.add("done");
      box.textContent = `✓ Right. ${evidence} Unscaled, the softmax is a hard argmax (key ${j}'s ` +
        "gradient has nearly vanished); divided by √d_k it is not, so every key still gets gradient.";
    } else if (ex.hard.scaled) {
      box.textContent = `That is the reason, but these numbers do not show it: ${evidence} ` +
        "Divided by √d_k the softmax is still a hard argmax" +
        (ex.temperature < 1 ? ` — τ = ${ex.temperature} below 1 sharpens it again.`
          : ex.d_k === 1 ? " — at d_k = 1 the scale is 1 and changes nothing."
            : " — these scores are too far apart.") + " Set τ = 1 and check again.";
    } else {
      box.textContent = `That is the reason, but these numbers do not show it: ${evidence} ` +
        "Unscaled, the softmax is not a hard argmax yet: raise d_k and check again.";
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
  $("#dk-slider").setAttribute("aria-valuetext", `d_k = ${state.dk}`);
  if (document.activeElement !== $("#dk-input")) {
    $("#dk-input").value = String(state.dk);
    $("#dk-input").classList.remove("bad");
  }
  $("#dk-value").textContent = `${state.dk}  (√d_k = ${fmt(Math.sqrt(state.dk), 3)})`;
  $("#tau-slider").value = sliderFromTau(state.tau);
  $("#tau-value").textContent = String(state.tau);
  if (document.activeElement !== $("#scale-scores")) {
    $("#scale-scores").value = state.scores.join(", ");
    $("#scale-scores").classList.remove("bad");
  }
}

const DK_PROBLEM = { min: 1, max: MAX_DK, whole: true };

function setDk(dk) {
  state.dk = Math.min(MAX_DK, Math.max(1, dk));
  sync();
  writeURL();
  show();
}

export function mount(section) {
  root = section;
  $("#dk-slider").addEventListener("input", () => setDk(dkFromSlider(Number($("#dk-slider").value))));
  // the slider is logarithmic (it jumps 21 → 23 when dragged): its arrow keys step d_k by one,
  // so every d_k from 1 to 1024 is reachable by keyboard; Page Up/Down keep the big steps
  $("#dk-slider").addEventListener("keydown", (event) => {
    const step = { ArrowRight: 1, ArrowUp: 1, ArrowLeft: -1, ArrowDown: -1 }[event.key];
    if (!step) return;
    event.preventDefault();
    setDk(state.dk + step);
  });
  $("#dk-input").addEventListener("input", () => {
    const read = readNumber($("#dk-input"), "d_k", DK_PROBLEM);
    $("#dk-input").classList.toggle("bad", "problem" in read);
    if (read.problem) {
      showError(name, new ApiError(0, read.problem));
      return;
    }
    state.dk = read.value;
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

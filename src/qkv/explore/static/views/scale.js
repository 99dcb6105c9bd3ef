// View 3 · Scale: why divide by √d_k. The seed's scores [8, 0] grown or shrunk with d_k, their
// softmax with and without the scale, the gradient left for each key, and random vectors whose
// dot products spread like √d_k — all from qkv.explain (POST /api/scale).
import { ApiError, Channel } from "../core/api.js";
import { announce, el, fmt, parseVector } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { state, writeURL } from "../core/state.js";

export const name = "scale";
export const READS = {
  "/api/scale": ["example.scores", "example.reference_d_k", "example.raw_scores",
    "example.scale", "example.d_k", "example.temperature", "example.scaled", "example.weights",
    "example.unscaled_weights", "example.gradient", "example.unscaled_gradient",
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

export function show() {
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
      "data-value": g }, g < 1e-3 ? g.toExponential(1) : fmt(g))]),
  ]);
  const last = ex.unscaled_gradient.length - 1;
  $("#scale-example").replaceChildren(
    el("h3", {}, `two keys, one standard deviation apart: [${ex.scores.map((s) => fmt(s, 1)).join(", ")}] at d_k = ${ex.reference_d_k}`),
    el("div", { cls: "scroll" }, [table]),
    el("h4", {}, `divided by τ·√d_k (scale 1/(${ex.temperature}·√${ex.d_k}))`),
    bars("example-weight", ex.weights, labels),
    gradRow("example-grad", ex.gradient),
    el("h4", {}, ex.temperature === 1 ? "not divided (scale 1)" : `not divided by √d_k (scale 1/τ)`),
    bars("example-unscaled-weight", ex.unscaled_weights, labels),
    gradRow("example-unscaled-grad", ex.unscaled_gradient),
    el("p", { cls: "note" }, `As d_k grows the raw scores grow like √d_k: unscaled, the last ` +
      `key's weight and its gradient (${ex.unscaled_gradient[last].toExponential(1)}) vanish; ` +
      `divided by √d_k they stay at ${fmt(ex.weights[last], 3)} and ${fmt(ex.gradient[last], 3)}.`),
  );
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

export function sync() {
  $("#dk-slider").value = sliderFromDk(state.dk);
  $("#dk-value").textContent = `${state.dk}  (√d_k = ${fmt(Math.sqrt(state.dk), 3)})`;
  $("#tau-slider").value = sliderFromTau(state.tau);
  $("#tau-value").textContent = String(state.tau);
  if (document.activeElement !== $("#scale-scores")) {
    $("#scale-scores").value = state.scores.join(", ");
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
    if (!parsed) {
      showError(name, new ApiError(0, "scores: write numbers separated by commas, e.g. 8, 0"));
      return;
    }
    state.scores = parsed;
    writeURL();
    show();
  });
}

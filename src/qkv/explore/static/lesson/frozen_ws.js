// View 1's "the W's are learned; the power is the three together": the toy of this view
// trained with W_Q, W_K, W_V all learned, with one frozen (at the identity or at random), and
// with only one learned (POST /api/projections/frozen, the shipped runs of
// qkv.tasks.frozen_projections; its reads are declared in views/projections.js). A table, a
// caption written from its numbers, and a button per run that loads its W's into the planes
// above, so the learner sees what that lookup does.
import { post, setPending } from "../core/api.js";
import { el, fmt } from "../core/dom.js";

let box = null;
let load = null; // (w_q, w_k, w_v, label) → loads them into view 1's planes
let runs = null; // the one request's promise: the runs do not change while the page is open

const NAMES = ["W_Q", "W_K", "W_V"];
const of = (n, total) => `${n} of ${total}`;
/** An error in a sentence: 3 significant digits (0.000512, 0.0147, 0.312). */
const err = (x) => (x >= 0.1 ? fmt(x, 3) : x.toPrecision(3));

function ask() {
  if (!runs) {
    setPending(+1);
    runs = post("/api/projections/frozen", {}).finally(() => setPending(-1));
    runs.catch(() => { runs = null; });
  }
  return runs;
}

/** The runs by what was learned: all, one frozen (by name and what it is frozen at), one
 * learned alone (by name), none. */
export function sorted(d) {
  const all = d.runs.find((r) => r.learned.length === 3);
  const frozen = {};
  const alone = {};
  for (const r of d.runs) {
    if (r.learned.length === 2) {
      const name = NAMES.find((n) => !r.learned.includes(n));
      frozen[name] = { ...frozen[name], [r.frozen_at]: r };
    } else if (r.learned.length === 1) alone[r.learned[0]] = r;
  }
  return { all, frozen, alone, none: d.runs.find((r) => r.learned.length === 0) };
}

/** Sentences written from the runs' numbers. */
export function caption(d) {
  const { all, frozen, alone, none } = sorted(d);
  const T = all.tokens;
  const ratio = (r) => r.mse / all.mse;
  const vs = (r) => `error ${err(r.mse)}, ${fmt(ratio(r), ratio(r) >= 10 ? 0 : 1)}×`;
  const lookup = (r) => `largest weight on the neighbour for ${of(r.top_on_neighbour, T)}, on ` +
    `itself for ${r.top_on_self}, mean weight on the neighbour ${fmt(r.weight_on_neighbour, 2)}`;
  const finds = (r) => r.top_on_neighbour > T / 2; // the lookup lands on the neighbour mostly
  const wrong = (rs) => rs.filter((r) => r.right < T);
  const out = [];
  out.push(`All three learned: mean squared error ${err(all.mse_start)} → ${err(all.mse)} in ` +
    `${d.steps.toLocaleString("en")} steps; ${of(all.right, T)} outputs nearest their neighbour; ` +
    `${lookup(all)}. (Below, × is an error as a multiple of this one.)`);
  const qk = ["W_Q", "W_K"].flatMap((n) => Object.values(frozen[n] || {}));
  const qkWrong = wrong(qk);
  const qkWorst = Math.max(...qk.map(ratio));
  const qkSoft = Math.max(...qk.map((r) => r.weight_on_neighbour));
  out.push(`W_Q or W_K frozen — ${qk.map((r) => `${r.label}: ${of(r.right, T)} right, ${vs(r)}, ` +
    `mean weight on the neighbour ${fmt(r.weight_on_neighbour, 2)}`).join("; ")}. ` + (qkWrong
    .length ? `Outputs go wrong with ${qkWrong.map((r) => r.label).join(" and ")}. ` : "") +
    "Queries and keys meet only in the scores, X W_Q (X W_K)ᵀ, so the learned one could take on " +
    "the frozen one's part" + (qkWorst > 2
    ? `; in ${d.steps.toLocaleString("en")} steps these runs did not: up to ` +
      `${fmt(qkWorst, 0)}× the error, the mean weight on the neighbour at most ` +
      `${fmt(qkSoft, 2)} — W_V turning each point did more of the work than a sharp lookup.`
    : ", and did."));
  const v = frozen.W_V || {};
  if (v.identity && v.random) {
    out.push(`W_V frozen at the identity: ${of(v.identity.right, T)} right, ${vs(v.identity)}, ` +
      `${lookup(v.identity)}` + (v.identity.right === T ? " — passed along unchanged, the " +
      "neighbour's point is the answer. " : ". ") + `Frozen at random: ${of(v.random.right, T)} ` +
      `right, ${vs(v.random)}, ${lookup(v.random)}` + (v.random.right < T
      ? " — what comes back is turned wrong, and no other W can undo W_V: it acts on what the " +
        "weights have already chosen."
      : "."));
  }
  const single = NAMES.filter((n) => alone[n]).map((n) => `only ${n} learned: ` +
    `${of(alone[n].right, T)} right, ${vs(alone[n])}, ${lookup(alone[n])}`);
  if (single.length) out.push(`One W learned, the other two at the identity — ${single.join("; ")}.`);
  const selfish = NAMES.filter((n) => alone[n] && alone[n].top_on_self > T / 2);
  if (selfish.length) {
    out.push(`With ${selfish.join(" or ")} alone each token looks up itself (with W_Q = W_K = ` +
      "the identity a point scores highest against itself): what it outputs is a turn of its " +
      "own point, not something found elsewhere.");
  }
  if (none) out.push(`None learned: ${of(none.right, T)} right, ${vs(none)}.`);
  const qkAlone = ["W_Q", "W_K"].every((n) => alone[n] && finds(alone[n]));
  const said = [];
  if (qkAlone && selfish.includes("W_V")) {
    said.push("who looks up whom is set by W_Q and W_K — either one learned makes the lookup " +
      "land on the neighbour, both at the identity make every token look up itself — and what " +
      "comes back is W_V's");
  } else {
    said.push(`the lookup lands on the neighbour for most tokens with ${d.runs.filter(finds)
      .map((r) => r.label).join(", ") || "no run"}`);
  }
  // is the error lowest exactly where the lookup is sharp (most weight on the neighbour)?
  const sharp = d.runs.filter((r) => r.weight_on_neighbour > 0.5);
  const lowest = [...d.runs].sort((a, b) => a.mse - b.mse).slice(0, sharp.length);
  if (sharp.length && lowest.every((r) => sharp.includes(r))) {
    said.push(`the ${sharp.length} runs with the lowest errors are the ${sharp.length} whose ` +
      `lookup is sharp (mean weight on the neighbour above 0.5: ${sharp.map((r) => `${r.label}, ` +
      `${fmt(r.weight_on_neighbour, 2)}`).join("; ")})`);
  }
  const bad = wrong(d.runs);
  const best = d.runs.reduce((a, b) => (b.mse < a.mse ? b : a));
  out.push(`So ${said.join("; and ")}. ` + (bad.length ? `Outputs go wrong with ${bad.map((r) => r.label)
    .join(", ")}. ` : "") + `The lowest error: ${best.label} (${err(best.mse)})` +
    (best === all ? ": the three learned together." : "."));
  return out;
}

function table(d) {
  const T = d.runs[0].tokens;
  const head = el("tr", {}, ["setting", "error (MSE)", `right (of ${T})`,
    "largest weight on the neighbour", "on itself", "mean weight on the neighbour", ""]
    .map((t) => el("th", {}, t)));
  const rows = d.runs.map((r, i) => el("tr", { "data-testid": `proj-frozen-row-${i}` }, [
    el("th", {}, r.label),
    el("td", { "data-testid": `proj-frozen-mse-${i}`, "data-value": r.mse }, err(r.mse)),
    el("td", { "data-testid": `proj-frozen-right-${i}`, "data-value": r.right }, String(r.right)),
    el("td", { "data-value": r.top_on_neighbour }, String(r.top_on_neighbour)),
    el("td", { "data-value": r.top_on_self }, String(r.top_on_self)),
    el("td", { "data-value": r.weight_on_neighbour }, fmt(r.weight_on_neighbour, 3)),
    el("td", {}, el("button", { type: "button", "data-testid": `proj-frozen-load-${i}`,
      "data-i": i }, "show above")),
  ]));
  return el("div", { cls: "scroll", tabindex: 0, role: "region",
    "aria-label": "the toy trained with the W's learned or frozen, a table" }, [
    el("table", { cls: "matrix", "data-testid": "proj-frozen-table" }, [
      el("caption", {}, `each run: ${d.steps.toLocaleString("en")} steps of gradient descent ` +
        `on circles of ${d.points[0]} to ${d.points[d.points.length - 1]} points`),
      head, ...rows])]);
}

function render(d) {
  box.replaceChildren(
    el("h3", {}, "Learned together, or one frozen: the same task, trained 11 ways".replace(
      "11", String(d.runs.length))),
    el("p", { cls: "note" }, `Each point of a circle outputs its counter-clockwise neighbour — ` +
      `this view's "learned" task, on circles of ${d.points[0]} to ` +
      `${d.points[d.points.length - 1]} points at once, so no token can know from itself where ` +
      "its neighbour lies. \"show above\" loads a run's W's into the planes (on this view's " +
      "8-point circle)."),
    table(d),
    el("div", { "data-testid": "proj-frozen-words" }, caption(d).map((s) => el("p", {}, s))),
    el("p", { cls: "note" }, ["From ", el("code", {}, d.command), "."]));
  box.onclick = (event) => {
    const button = event.target.closest("[data-i]");
    if (!button) return;
    const r = d.runs[Number(button.dataset.i)];
    load(r.w_q, r.w_k, r.w_v, r.label);
  };
}

/** Mount the panel in ``node``; ``loader(w_q, w_k, w_v, label)`` puts a run's W's in the view. */
export function mount(node, loader) {
  box = node;
  load = loader;
}

export function show() {
  if (!box || box.childElementCount) return;
  ask().then(render, (e) => {
    box.replaceChildren(el("p", { cls: "note" }, `The frozen-W runs could not be loaded: ` +
      `${e.message}`));
  });
}

// View 10's last section: does the GPT above grow an induction head? The shipped runs
// (POST /api/gpt/own-heads, computed by qkv.tasks.own_heads): the attention-only model and the
// GPT's own recipe on text with repeats, the GPT on plain text trained 5× longer (context 64
// and 256) — their
// induction scores and repeat losses on one clock (training characters seen) — then why plain
// text does not build one: how often copying tells the next character something the text's
// statistics do not (qkv.tasks.copy_payoff), and what the induction heads are worth when they
// are switched off. Every sentence is written from the numbers it is sent.
import { Channel } from "../core/api.js";
import { PALETTE, lineChart } from "../core/chart.js";
import { el, fmt, scrollBox } from "../core/dom.js";
import { count, pct } from "./draw.js";

const VIEW = "gpt";
let root;
const $ = (sel) => root.querySelector(sel);
let data = null;
let asked = false; // the request is sent (or answered)

const channel = new Channel(VIEW, "/api/gpt/own-heads", (d) => {
  data = d;
  render();
}, (err) => {
  asked = false; // asked again when the view is shown again
  $("#gpt-own").replaceChildren(el("p", { cls: "note" },
    `The GPT's longer runs are not shown: ${err.message}`));
});

const LABELS = { "attention-only": "attention-only model, repeats",
  "gpt-repeats": "GPT, text with repeats", "gpt-text": "GPT, plain text (5× longer)",
  "gpt-text-256": "GPT, plain text, context 256" };
const WHO = { "gpt-repeats": "the GPT trained with repeats",
  "gpt-text": "the GPT trained 5× longer on plain text",
  "gpt-text-256": "the GPT trained on plain text with a context of 256" };
const DASHES = ["", "6 3", "2 3", "9 3 2 3"];
// where two runs' curves coincide (both plain-text GPTs stay near 0.02), a ring around a square
// keeps both visible
const MARKERS = ["circle", "triangle", "ring", "square"];
const millions = (n) => `${fmt(n / 1e6, 2)} M`;
const stepAt = (r) => `step ${r.step.toLocaleString("en")} (${millions(r.chars)} characters)`;
const heads = (hs) => hs.map(([l, h]) => `L${l}H${h}`).join(" and ");

/** One run's induction sentence: when its score first reached the threshold, or its best. */
function runSays(run, t) {
  const end = run.history[run.history.length - 1];
  const what = `${LABELS[run.name]} (${run.layers} layers × ${run.heads} heads` +
    `${run.mlp ? ", with MLPs" : ", attention only"}; ${end.step.toLocaleString("en")} steps ` +
    `of ${run.batch} × ${run.context} characters)`;
  return run.first
    ? `${what}: an induction head from ${stepAt(run.first)}, score ${fmt(run.first.induction, 3)}` +
      `; ${fmt(end.induction, 3)} at the end.`
    : `${what}: no induction head — its best score is ${fmt(run.best.induction, 3)} at ` +
      `${stepAt(run.best)}, under ${t}.`;
}

function chart(testid, label, yLabel, key, yMax, refY) {
  const xMax = Math.max(...data.runs.map((r) => r.history[r.history.length - 1].chars));
  const step = xMax > 8e6 ? 4e6 : 2e6;
  const ticks = Array.from({ length: Math.floor(xMax / step) + 1 }, (_, i) => i * step);
  const width = Math.max(300, Math.min(520, $("#gpt-own").clientWidth || 520));
  return lineChart({ testid, label, width, height: 250,
    x: { label: "training characters seen", domain: [0, 1.04 * xMax], ticks,
      format: (v) => (v ? `${v / 1e6} M` : "0") },
    y: { label: yLabel, domain: [0, yMax], ticks: Array.from({ length: 5 }, (_, i) =>
      (i * yMax) / 4), format: (v) => fmt(v, 2) },
    series: data.runs.map((run, i) => ({ name: LABELS[run.name], color: PALETTE[i],
      dash: DASHES[i % DASHES.length], marker: MARKERS[i % MARKERS.length], points: run.history.filter((r) => r[key] !== null)
        .map((r) => ({ x: r.chars, y: r[key], title: `${LABELS[run.name]}, ` +
          `${stepAt(r)}: ${fmt(r[key], 3)}` })) })),
    refY });
}

function payoffTable() {
  const head = ["windows", `the last ${data.match} characters occurred before`,
    "copying what followed is right", "right where the text's statistics are wrong (news)"];
  const rows = data.payoff.map((r) => el("tr", { "data-testid": `gpt-own-payoff-${r.context}` +
    (r.repeats ? "-repeats" : "") }, [el("th", { scope: "row" }, r.what),
    ...[r.found, r.right, r.news].map((v) => el("td", {}, pct(v)))]));
  return scrollBox([el("table", { cls: "matrix", "data-testid": "gpt-own-payoff" }, [
    el("caption", {}, "How often a window's own earlier text predicts the next character, " +
      `as a share of all positions (the validation text; the text's statistics: the character ` +
      `that most often follows those ${data.match} characters in the training text)`),
    el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows)])], "how often copying predicts the next character");
}

/** Why plain text does not build one, from the payoff rows and the ablations. */
function whySays() {
  const own = data.payoff.find((r) => !r.repeats && r.context === data.runs[1].context);
  const rep = data.payoff.find((r) => r.repeats);
  const longest = data.payoff.filter((r) => !r.repeats).at(-1);
  const wide = data.runs.find((r) => r.name === "gpt-text-256");
  const widePay = wide && data.payoff.find((r) => !r.repeats && r.context === wide.context);
  const wrong = 1 - own.right / own.found;
  const tried = !wide || !widePay ? "" : ` Trained on windows of ${wide.context} characters ` +
    `(news at ${pct(widePay.news)}), the same GPT ` + (wide.first
    ? `grows an induction head at ${stepAt(wide.first)}.`
    : `still grows none: its best score is ${fmt(wide.best.induction, 3)}.`);
  return `In the GPT's own ${own.context}-character windows of plain text, copying is news ` +
    `at ${pct(own.news)} of positions; where the last ${data.match} characters did occur ` +
    `before, copying what followed them is wrong ${pct(wrong)} of the time. The windows with ` +
    `repeats offer news at ${pct(rep.news)}, ${fmt(rep.news / own.news, 1)}× as often. The ` +
    `same text in longer windows offers more — ${pct(longest.news)} at ` +
    `${longest.context.toLocaleString("en")} characters — but this GPT reads ` +
    `${own.context}.${tried} Gradient descent builds what lowers the loss; where copying ` +
    "rarely would, it builds none.";
}

function worthSays(w) {
  const d = (k) => w.without[k] - w.with[k];
  const who = WHO[w.name];
  const what = w.induction_heads
    ? `Switch off ${heads(w.heads)}, the induction ${w.heads.length > 1 ? "heads" : "head"} ` +
      `of ${who}`
    : `Switch off ${heads(w.heads)}, the best-scoring head of ${who} (not an induction head)`;
  const change = Math.abs(d("plain")) < 0.0005 ? "no change at three decimals"
    : `${d("plain") > 0 ? "+" : "−"}${fmt(Math.abs(d("plain")), 3)}`;
  // the verdict compares the two losses it quotes, on the same windows
  const costs = w.induction_heads && d("plain") < 0 && d("news") > 0 && d("wrong") < 0
    ? ` On plain text this induction head costs more than it gives: it lowers the loss at ` +
      `the news positions (${pct(w.news_share)} of positions) and raises it where copying is ` +
      `wrong (${pct(w.wrong_share)} of positions: ${fmt(w.without.wrong, 3)} without it, ` +
      `${fmt(w.with.wrong, 3)} with it).`
    : "";
  return `${what} — its output replaced by its mean — and, on ${count(w.windows, "window")} ` +
    `of plain validation text, its loss moves ${fmt(w.with.plain, 3)} → ` +
    `${fmt(w.without.plain, 3)} nats per character (${change}); at the news positions ` +
    `${fmt(w.with.news, 3)} → ${fmt(w.without.news, 3)}; on the repeated characters of ` +
    `windows with repeats ${fmt(w.with.repeats, 3)} → ${fmt(w.without.repeats, 3)}.${costs}`;
}

function render() {
  const t = data.threshold;
  const repeats = data.runs.find((r) => r.name === "gpt-repeats");
  const maxRepeat = Math.ceil(Math.max(...data.runs.flatMap((r) => r.history.map(
    (x) => x.repeat))));
  $("#gpt-own").replaceChildren(
    el("p", { "data-testid": "gpt-own-intro" }, "Olsson et al. found induction heads in " +
      "models of two or more layers trained long enough on text. The GPT above has four " +
      `layers and none. More runs of its own recipe, each shipped with the command that made ` +
      `it, answer why: ${data.runs.filter((r) => r.name !== "attention-only")
        .map((r) => r.words).join("; ")}. Their clock is the training characters seen, so ` +
      "the attention-only model's phase change sits on the same axis."),
    el("div", { cls: "gpt-ind-charts" }, [
      chart("gpt-own-score", "best induction score against training characters seen",
        "induction score", "induction", 1, { value: t, label: `induction head ≥ ${t}` }),
      chart("gpt-own-repeat", "loss on the repeated characters against training characters " +
        "seen", "loss on repeats (nats)", "repeat", maxRepeat)]),
    el("ul", { "data-testid": "gpt-own-runs" }, data.runs.map((run) =>
      el("li", { "data-testid": `gpt-own-run-${run.name}` }, runSays(run, t)))),
    el("p", { cls: "note" }, ["Reproduce them: ", ...data.runs.flatMap((run, i) =>
      [i ? " · " : "", el("code", { "data-testid": `gpt-own-command-${run.name}` },
        run.command)])]),
    el("h4", {}, "Why plain text does not build one: what copying is worth"),
    payoffTable(),
    el("p", { "data-testid": "gpt-own-why" }, whySays()),
    ...data.worth.map((w) => el("p", { "data-testid": `gpt-own-worth-${w.name}` },
      worthSays(w))),
    el("p", { cls: "note", "data-testid": "gpt-own-burst" }, "Chan et al. (2022) found the " +
      "same in other data: in-context learning appears when items recur within a context " +
      `("bursty" data). ${repeats.first ? "Written-in repeats make this text bursty, and " +
      "the GPT's recipe then grows an induction head." : "Even with written-in repeats this " +
      "recipe grew none in its steps."}`));
}

// asked when the section first comes into view: its numbers take seconds to measure, once
const seen = typeof IntersectionObserver === "undefined" ? null : new IntersectionObserver(
  (entries) => { if (entries.some((e) => e.isIntersecting)) ask(); });

function ask() {
  if (asked) return;
  asked = true;
  seen?.disconnect();
  channel.send({});
}

export function show() {
  if (data || asked) return;
  if (seen) seen.observe($("#gpt-own"));
  else ask();
}

/** Put the section after `anchor` (an element of view 10). */
export function mount(section, anchor) {
  root = section;
  anchor.after(
    el("h3", {}, "The GPT above, trained longer or on repeats: does it grow an induction head?"),
    el("div", { id: "gpt-own", "data-testid": "gpt-own" },
      el("p", { cls: "note" }, "Loading the runs…")));
}

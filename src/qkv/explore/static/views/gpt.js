// View 10 · A GPT: qkv's own character-level GPT (trained by `qkv train gpt`, shipped) reading
// the past through a causal mask to predict the next character; its heads switched off one by
// one (ablation) beside their direct pushes (attribution); head roles on random and real text;
// and a small attention-only model growing an induction head (`qkv train induction`), live,
// with its circuit cut apart. Every number comes from the server (POST /api/gpt/predict,
// /generate, /roles, /where; the induction model's /induction, /circuit, /circuit/table),
// computed by qkv.tasks.gpt_watch and qkv.tasks.circuits; the modules only draw it and write the
// sentences from it. The heat map, bars and formatters are gpt/draw.js, the role tables
// gpt/roles.js, the induction model gpt/induction.js and its circuit controls gpt/circuit.js;
// their reads are declared here, in this view's READS.
import { Channel } from "../core/api.js";
import { announce, el, fmt } from "../core/dom.js";
import { COLORS, heat, legend } from "../core/legend.js";
import { defineState, state, writeURL } from "../core/state.js";
import { bar, count, heatmap, pct, points, show1, signed } from "../gpt/draw.js";
import {
  mount as mountInduction, setGptRoles, show as showInduction,
} from "../gpt/induction.js";
import { mount as mountOwn, show as showOwn } from "../gpt/own_heads.js";
import { roleBlock, roleGrid } from "../gpt/roles.js";
import { mountGpt as mountScale, showGpt as showScale } from "../lesson/dk_rule.js";
import { logitWords, probabilityWords } from "../gpt/effects_words.js";

export const name = "gpt";
export const READS = {
  "/api/gpt/predict": [
    "chars", "layers", "heads", "context", "weights", "allowed", "temperature", "next.chars",
    "next.probs", "attribution.char", "attribution.logit", "attribution.heads",
    "attribution.mlps", "attribution.embeddings", "attribution.biases", "effects.char",
    "effects.p_before", "effects.drop", "effects.total", "effects.layer_drop", "effects.kind",
    "prompt_roles.previous", "prompt_roles.induction", "prompt_roles.chance_previous",
    "prompt_roles.chance_induction", "prompt_roles.n_induction", "ablation.labels",
    "ablation.kind", "ablation.after", "ablation.top.chars", "ablation.top.probs"],
  "/api/gpt/generate": [
    "prompt", "chars", "probs", "weights", "context"],
  "/api/gpt/roles": [
    "random.previous_token", "random.induction", "random.chance_previous",
    "random.chance_induction", "random.what", "random.sentence", "random.last_space",
    "random.example", "random.example_weights", "random.source", "text.previous_token",
    "text.induction", "text.chance_previous", "text.chance_induction", "text.what",
    "text.sentence", "text.last_space", "text.example", "text.example_weights", "text.source"],
  "/api/gpt/where": [
    "layer", "head", "kind", "prompt", "char", "drop", "n_candidates", "length"],
  "/api/gpt/induction": [
    "layers", "heads", "width", "context", "params", "steps", "elapsed", "history.step",
    "history.val", "history.repeat", "history.induction", "history.previous", "phase.step",
    "phase.induction_at", "phase.steepest_from", "phase.steepest_to", "phase.repeat_from",
    "phase.repeat_to", "threshold", "command", "random.previous_token", "random.induction",
    "random.chance_previous", "random.chance_induction", "random.what", "random.sentence",
    "random.last_space", "random.example", "random.example_weights", "random.source",
    "text.sentence"],
  "/api/gpt/circuit": [
    "chars", "layers", "heads", "weights", "intact_weights", "allowed", "labels", "next.chars",
    "next.probs", "next.after", "copying.char", "copying.earlier", "copying.keys", "copying.copied",
    "copying.weight_before", "copying.weight_after", "copying.p_before", "copying.p_after",
    "repeat.n", "repeat.before", "repeat.after"],
  "/api/gpt/circuit/table": [
    "n_sequences", "half", "layers", "heads", "context", "alphabet", "threshold",
    "base.induction", "base.previous", "base.copy_loss", "base.first_loss", "off.layer",
    "off.head", "off.induction", "off.previous", "off.copy_loss", "off.first_loss",
    "paths.source", "paths.target", "paths.input", "paths.induction", "paths.previous",
    "paths.copy_loss", "paths.first_loss"],
  "/api/gpt/own-heads": [
    "threshold", "match", "runs.name", "runs.words", "runs.command", "runs.layers",
    "runs.heads", "runs.context", "runs.batch", "runs.mlp", "runs.history.step",
    "runs.history.chars", "runs.history.induction", "runs.history.repeat", "runs.first",
    "runs.first.step", "runs.first.chars", "runs.first.induction", "runs.best.step",
    "runs.best.chars", "runs.best.induction", "payoff.what", "payoff.context", "payoff.repeats",
    "payoff.found", "payoff.right", "payoff.news", "worth.name", "worth.heads",
    "worth.induction_heads", "worth.windows", "worth.news_share", "worth.wrong_share",
    "worth.with.wrong", "worth.without.wrong", "worth.with.plain", "worth.with.news",
    "worth.with.repeats", "worth.without.plain", "worth.without.news", "worth.without.repeats"],
  "/api/heads/sizes": ["models.name", "models.here", "models.decoder", "models.layers",
    "models.heads", "models.d_model", "models.d_k", "models.context", "models.kv_per_token",
    "missing"],
};

// off: what is switched off, "L.H" for a head, "L" for a layer's whole attention
defineState("gpt", { prompt: "ROMEO.\nI will not", temperature: 1, layer: 0, head: 0,
  steps: 0, seed: 0, off: [], kind: "zero" });

let root;
const $ = (sel) => root.querySelector(sel);
let last = null; // the last /api/gpt/predict answer
let roles = null; // /api/gpt/roles (fixed: the model is fixed)
let rolePick = { random: [0, 0], text: [0, 0] };
let where = null; // /api/gpt/where for the picked head

const predictChannel = new Channel(name, "/api/gpt/predict", (data) => {
  last = data;
  delete root.dataset.stale; // what is drawn is this prompt's again
  renderPrompt();
  renderHeads();
  renderNext();
  renderAblation();
  renderEffects();
  renderTask();
  renderPromptRoles();
  sendWhere();
});
const generateChannel = new Channel(name, "/api/gpt/generate", renderGeneration);
const rolesChannel = new Channel(name, "/api/gpt/roles", (data) => {
  roles = data;
  renderRoles();
  setGptRoles(data.random); // the induction model's first sentence quotes these roles
});
const whereChannel = new Channel(name, "/api/gpt/where", (data) => {
  where = data;
  renderWhere();
});
/** Ask where the picked head matters most (once per head and kind). */
function sendWhere() {
  const g = state.gpt;
  if (where && where.layer === g.layer && where.head === g.head && where.kind === g.kind) return;
  $("#gpt-where").replaceChildren(el("p", { cls: "note" }, `searching the validation text for ` +
    `the prompt where L${g.layer}H${g.head} matters most…`));
  whereChannel.send({ layer: g.layer, head: g.head, ablation: g.kind });
}

/** What the page asks the server to switch off, from state.gpt.off. */
function ablateBody() {
  return state.gpt.off.map((key) => {
    const [l, h] = String(key).split(".").map(Number);
    return h === undefined || Number.isNaN(h) ? { layer: l, head: null } : { layer: l, head: h };
  });
}

function sendPredict() {
  const g = state.gpt;
  predictChannel.send({ prompt: g.prompt, temperature: g.temperature, ablate: ablateBody(),
    ablation: g.kind });
}

export function show() {
  const g = state.gpt;
  $("#gpt-prompt").value = g.prompt;
  $("#gpt-temperature").value = g.temperature;
  $("#gpt-temperature-value").textContent = fmt(g.temperature, 2);
  sendPredict();
  sendGeneration();
  if (!roles) rolesChannel.send({});
  showInduction();
  showOwn(); // the GPT trained longer, or on repeats
  showScale(); // this GPT beside the published models
}

function sendGeneration() {
  const g = state.gpt;
  if (g.steps === 0) {
    $("#gpt-generation").replaceChildren(el("p", { cls: "note" },
      "Press “Step” to draw the next character and append it; each step runs through the " +
      "KV cache."));
    return;
  }
  generateChannel.send({ prompt: g.prompt, steps: g.steps, temperature: g.temperature,
    seed: g.seed });
}

function renderPrompt() {
  const chips = last.chars.map((c, i) => el("span", { cls: "gpt-char",
    "data-testid": `gpt-char-${i}`, title: `position ${i}` }, show1(c)));
  $("#gpt-chars").replaceChildren(el("p", {}, [`${last.chars.length} of ${last.context} ` +
    "characters (⏎ newline, ␣ space): "]), el("div", { cls: "gpt-chars" }, chips));
}

/** Show head (l, h)'s pattern on the prompt, and bring it into view. */
function openHead(l, h) {
  state.gpt.layer = l;
  state.gpt.head = h;
  writeURL();
  renderHeads();
  renderGenerationHead();
  renderPromptRoles();
  sendWhere();
  const map = $('[data-testid="gpt-cell-region"]');
  if (map) {
    map.scrollIntoView({ block: "nearest" });
    map.focus({ preventScroll: true });
  }
  announce(`layer ${l}, head ${h}: its attention on the prompt is shown`);
}

function renderHeads() {
  const g = state.gpt;
  g.layer = Math.min(g.layer, last.layers - 1);
  g.head = Math.min(g.head, last.heads - 1);
  const picker = el("table", { cls: "gpt-grid", "data-testid": "gpt-head-picker" }, [
    el("caption", {}, "pick a head (layer × head)"),
    el("tr", {}, [el("th", {}, "layer"), ...Array.from({ length: last.heads },
      (_, h) => el("th", { scope: "col" }, `head ${h}`))]),
    ...last.weights.map((heads, l) => el("tr", {}, [el("th", { scope: "row" }, String(l)),
      ...heads.map((_, h) => {
        const b = el("button", { type: "button", "data-testid": `gpt-head-${l}-${h}`,
          "aria-pressed": l === g.layer && h === g.head ? "true" : "false" }, `L${l}H${h}`);
        b.addEventListener("click", () => openHead(l, h));
        return el("td", {}, b);
      })])),
  ]);
  const w = last.weights[g.layer][g.head];
  const n = last.chars.length;
  const lastRow = w[n - 1];
  const top = lastRow.map((x, j) => [x, j]).sort((a, b) => b[0] - a[0])[0];
  const masked = n * (n - 1) / 2;
  $("#gpt-heads").replaceChildren(picker,
    el("h4", { "data-testid": "gpt-heat-title" }, `layer ${g.layer} · head ${g.head}: row i is ` +
      `how character i spreads its attention over characters 0…i`),
    heatmap(w, last.allowed, last.chars, last.chars, "gpt-cell",
      `layer ${g.layer} head ${g.head} causal attention`),
    legend("gpt-legend"),
    el("p", { "data-testid": "gpt-heat-sentence" }, `${masked} of ${count(n * n, "pair")} ` +
      `${masked === 1 ? "is" : "are"} masked (a key after its query). The last character ` +
      `“${show1(last.chars[n - 1])}” puts its largest weight, ${fmt(top[0], 3)}, on ` +
      `“${show1(last.chars[top[1]])}” at position ${top[1]}.`));
}

function renderNext() {
  const ab = last.ablation;
  const rows = last.next.chars.map((c, i) => {
    const p = last.next.probs[i];
    const cells = [el("code", { cls: "gpt-bar-char" }, show1(c)), bar(p, "before"),
      el("span", {}, pct(p))];
    if (ab) {
      cells.push(el("span", { cls: "note" }, "→"), bar(ab.after[i], "after"),
        el("span", { "data-testid": `gpt-after-${i}`, "data-value": ab.after[i] },
          pct(ab.after[i])));
    }
    return el("div", { cls: "gpt-bar-row", "data-testid": `gpt-next-${i}`, "data-value": p },
      cells);
  });
  const a = last.attribution;
  const flat = a.heads.flatMap((row, l) => row.map((v, h) => [v, l, h]))
    .sort((x, y) => y[0] - x[0]);
  const best = flat[0], worst = flat[flat.length - 1];
  const headsSum = flat.reduce((s, x) => s + x[0], 0);
  const cells = a.heads.map((row, l) => el("tr", {}, [el("th", { scope: "row" }, String(l)),
    ...row.map((v, h) => {
      const b = el("button", { type: "button", "data-testid": `gpt-push-${l}-${h}`,
        "data-value": v, "aria-label": `L${l}H${h} pushes ${fmt(v, 2)}: open its pattern` },
      signed(v));
      b.addEventListener("click", () => openHead(l, h));
      return el("td", {}, b);
    })]));
  const abSentence = ab ? ablationSentence(ab) : null;
  $("#gpt-next").replaceChildren(
    el("h4", {}, `next character at T = ${fmt(last.temperature, 2)} (the ${rows.length} most ` +
      "likely" + (ab ? `; → with ${ab.labels.join(", ")} switched off` : "") + ")"),
    el("div", { cls: "gpt-bars" }, rows),
    ...(abSentence ? [el("p", { "data-testid": "gpt-ablation-sentence", cls: "feedback" },
      abSentence)] : []),
    el("h4", {}, `why “${show1(a.char)}”? each head's direct push on its logit (click one ` +
      "for its pattern)"),
    el("p", { "data-testid": "gpt-why" }, `logit ${fmt(a.logit, 2)} = heads ` +
      `${fmt(headsSum, 2)} + MLPs ${fmt(a.mlps, 2)} + embeddings ${fmt(a.embeddings, 2)} + ` +
      `biases ${fmt(a.biases, 2)}. Pushing it most: L${best[1]}H${best[2]} ` +
      `(${fmt(best[0], 2)}); against it most: L${worst[1]}H${worst[2]} (${fmt(worst[0], 2)}).`),
    el("table", { cls: "gpt-grid", "data-testid": "gpt-push" }, [
      el("tr", {}, [el("th", {}, "layer"), ...a.heads[0].map((_, h) =>
        el("th", { scope: "col" }, `head ${h}`))]), ...cells]));
  announce(`most likely next character ${show1(last.next.chars[0])}, ` +
    `${fmt(last.next.probs[0] * 100, 1)}%` + (abSentence ? `. ${abSentence}` : ""));
}

/** "With L1H2 switched off (zeroed), the most likely next character changes from “⏎” 81.3%
 * to “␣” 40.2%" — from the bars before and after. */
function ablationSentence(ab) {
  const c0 = last.next.chars[0], p0 = last.next.probs[0];
  const c1 = ab.top.chars[0], p1 = ab.top.probs[0];
  const how = ab.kind === "mean" ? "replaced by its mean on the validation text"
    : "zeroed";
  const what = ab.labels.length === 1 ? `${ab.labels[0]} switched off (${how})`
    : `${ab.labels.join(", ")} switched off (each ${how})`;
  if (c1 !== c0) {
    return `With ${what}, the most likely next character changes: “${show1(c0)}” ${pct(p0)} → ` +
      `“${show1(c1)}” ${pct(p1)} (“${show1(c0)}” now ${pct(ab.after[0])}).`;
  }
  const verb = ab.after[0] < p0 ? "falls" : ab.after[0] > p0 ? "rises" : "stays";
  return `With ${what}, the most likely next character is still “${show1(c0)}”; its ` +
    `probability ${verb}: ${pct(p0)} → ${pct(ab.after[0])}.`;
}

const isOff = (key) => state.gpt.off.map(String).includes(key);

function toggleOff(key) {
  const g = state.gpt;
  g.off = isOff(key) ? g.off.filter((k) => String(k) !== key) : [...g.off.map(String), key];
  writeURL();
  sendPredict();
}

/** The switches: each head, each layer's whole attention, zero or mean. */
function renderAblation() {
  const g = state.gpt;
  const heads = last.heads;
  const table = el("table", { cls: "gpt-grid", "data-testid": "gpt-off" }, [
    el("caption", {}, "switch off (press again to switch back on)"),
    el("tr", {}, [el("th", {}, "layer"), ...Array.from({ length: heads },
      (_, h) => el("th", { scope: "col" }, `head ${h}`)), el("th", { scope: "col" },
      "all its attention")]),
    ...Array.from({ length: last.layers }, (_, l) => el("tr", {}, [
      el("th", { scope: "row" }, String(l)),
      ...Array.from({ length: heads + 1 }, (_, h) => {
        const key = h < heads ? `${l}.${h}` : `${l}`;
        const label = h < heads ? `L${l}H${h}` : `L${l} all`;
        const b = el("button", { type: "button", "aria-pressed": isOff(key) ? "true" : "false",
          "data-testid": h < heads ? `gpt-off-${l}-${h}` : `gpt-off-${l}`,
          cls: isOff(key) ? "off" : "" }, isOff(key) ? `${label} off` : label);
        b.addEventListener("click", () => toggleOff(key));
        return el("td", {}, b);
      })])),
  ]);
  const kinds = el("fieldset", { cls: "controls" }, [el("legend", {}, "switched off means"),
    ...[["zero", "its output set to zero"], ["mean", "its output replaced by its mean over " +
      "40 windows of the validation text"]].map(([k, text]) => {
      const input = el("input", { type: "radio", name: "gpt-kind", value: k,
        "data-testid": `gpt-kind-${k}` });
      input.checked = g.kind === k;
      input.addEventListener("change", () => { g.kind = k; writeURL(); sendPredict(); });
      // (the where-search follows the kind: sendWhere runs after the answer)
      return el("label", {}, [input, ` ${text}`]);
    })]);
  const none = el("button", { type: "button", "data-testid": "gpt-off-none" },
    "Switch everything back on");
  none.disabled = g.off.length === 0;
  none.addEventListener("click", () => { g.off = []; writeURL(); sendPredict(); });
  // the outcome beside the switches too (the bars are above them)
  const summary = last.ablation ? ablationSentence(last.ablation)
    : `Everything is on: the most likely next character is “${show1(last.next.chars[0])}”, ` +
      `${pct(last.next.probs[0])} at T = ${fmt(last.temperature, 2)}.`;
  $("#gpt-ablate").replaceChildren(table, kinds, none,
    el("p", { cls: "feedback", "data-testid": "gpt-ablate-summary" }, summary));
}

/** Which heads matter most for this prompt: each head switched off alone (ablation: the total
 * effect, every path) beside its direct push (attribution). */
function renderEffects() {
  const e = last.effects, a = last.attribution;
  const table = el("table", { cls: "gpt-grid", "data-testid": "gpt-effects" }, [
    el("caption", {}, `switched off alone: the fall in “${show1(e.char)}”'s probability ` +
      "(click one for its pattern)"),
    el("tr", {}, [el("th", {}, "layer"), ...e.drop[0].map((_, h) =>
      el("th", { scope: "col" }, `head ${h}`)), el("th", { scope: "col" }, "all its attention")]),
    ...e.drop.map((row, l) => el("tr", {}, [el("th", { scope: "row" }, String(l)),
      ...row.map((d, h) => {
        const b = el("button", { type: "button", "data-testid": `gpt-drop-${l}-${h}`,
          "data-value": d, "data-total": e.total[l][h],
          "aria-label": `L${l}H${h}: ${points(d)}; open its pattern` }, points(d));
        b.style.background = heat(Math.max(0, Math.min(1, d / Math.max(e.p_before, 1e-9))));
        b.style.color = d / Math.max(e.p_before, 1e-9) > COLORS.ink_threshold ? COLORS.ink_light
          : COLORS.ink_dark;
        b.addEventListener("click", () => openHead(l, h));
        return el("td", {}, b);
      }), el("td", { "data-testid": `gpt-drop-${l}`, "data-value": e.layer_drop[l] },
        points(e.layer_drop[l]))])),
  ]);
  // one measure per sentence, named in it: the probability, then the logit's two measures
  $("#gpt-effects-box").replaceChildren(table,
    el("p", { "data-testid": "gpt-matters-sentence" }, probabilityWords(e)),
    el("p", { "data-testid": "gpt-disagree" }, logitWords(a, e)));
}

/** For the picked head: the candidate prompt where it matters most, offered as an example. */
function renderWhere() {
  const g = state.gpt, w = where;
  if (!w || w.layer !== g.layer || w.head !== g.head) return;
  const tryIt = el("button", { type: "button", "data-testid": "gpt-where-try" },
    `Try it with L${w.layer}H${w.head} switched off`);
  tryIt.addEventListener("click", () => {
    g.prompt = w.prompt;
    g.off = [`${w.layer}.${w.head}`];
    g.kind = w.kind;
    g.steps = 0;
    $("#gpt-prompt").value = w.prompt;
    root.dataset.stale = "1";
    writeURL();
    show();
  });
  const how = w.kind === "mean" ? "replacing its output by its mean" : "switching it off";
  box().replaceChildren(el("p", { "data-testid": "gpt-where-sentence" }, [
    `Where does L${w.layer}H${w.head} matter most? Of ${w.n_candidates} windows of ` +
    `${w.length} characters spread over the validation text, ${how} lowers the predicted ` +
    "next character most after ", el("code", { "data-testid": "gpt-where-prompt" },
      w.prompt.split("").map(show1).join("")),
    `: “${show1(w.char)}” loses ${fmt(100 * w.drop, 1)} points of probability.`]), tryIt);
}
const box = () => $("#gpt-where");

const SURE = 0.9; // the task: the most likely next character gets more than this

/** "Find a prompt where the most likely next character gets over 90% at temperature 1", from
 * the returned next-character probabilities, their temperature and the same character's
 * probability at T = 1 (effects.p_before: the argmax does not depend on T). */
function renderTask() {
  const box = $('[data-testid="task-sure"]');
  const c = last.next.chars[0], p = last.next.probs[0], t = last.temperature;
  const said = `after “${last.chars.map(show1).join("")}” the most likely next character, ` +
    `“${show1(c)}”, gets ${fmt(p * 100, 1)}% at T = ${fmt(t, 2)}`;
  const atOne = t === 1;
  const done = atOne && p > SURE;
  box.classList.toggle("done", done);
  if (atOne) {
    box.textContent = done ? `✓ ${said[0].toUpperCase()}${said.slice(1)}.`
      : `Not yet: ${said}; the task needs more than ${100 * SURE}%.`;
    return;
  }
  const p1 = last.effects.p_before; // the same character at T = 1
  const how = p > p1 ? `lowering T to ${fmt(t, 2)} sharpened the bars`
    : p < p1 ? `raising T to ${fmt(t, 2)} flattened the bars`
      : `T = ${fmt(t, 2)} left this character's share as it was`;
  box.textContent = `Not yet: ${said}; the task counts only T = 1, where it gets ` +
    `${fmt(p1 * 100, 1)}% (${how}).`;
}

let generation = null;

function renderGeneration(data) {
  generation = data;
  renderGenerationHead();
}

/** The generated text, and for the picked head which earlier characters each step read. */
function renderGenerationHead() {
  if (!generation) return;
  const g = state.gpt, d = generation;
  const text = d.prompt.concat(d.chars);
  const rows = d.chars.map((c, s) => {
    const w = d.weights[s][g.layer][g.head]; // (n,) over the characters before it
    const n = w.length;
    const chips = w.map((x, j) => {
      const chip = el("span", { cls: "gpt-char", "data-testid": `gpt-read-${s}-${j}`,
        "data-value": x, title: `“${show1(text[j])}” (${j}): ${fmt(x)}` }, show1(text[j]));
      chip.style.background = heat(x);
      chip.style.color = x > COLORS.ink_threshold ? COLORS.ink_light : COLORS.ink_dark;
      return chip;
    });
    const top = w.map((x, j) => [x, j]).sort((a, b) => b[0] - a[0])[0];
    return el("div", { cls: "gpt-step", "data-testid": `gpt-step-${s}` }, [
      el("p", {}, `step ${s + 1}: drew “${show1(c)}” (p = ${fmt(d.probs[s], 3)}); its query ` +
        `read the ${count(n, "cached key")}, most “${show1(text[top[1]])}” at ${top[1]} ` +
        `(${fmt(top[0], 3)})`),
      el("div", { cls: "gpt-chars" }, chips)]);
  });
  const n0 = d.prompt.length;
  $("#gpt-generation").replaceChildren(
    el("p", { "data-testid": "gpt-text" }, ["text: ", el("code", {}, text.map(show1).join(""))]),
    el("p", { cls: "note" }, `Through the KV cache each step projects only the new character ` +
      `and its query reads the cached keys: ${count(n0, "key")} at the first step, ` +
      `${n0 + d.chars.length - 1} at the last — O(n·d) per step, not a full O(n²·d) pass. ` +
      `Shown: layer ${g.layer}, head ${g.head} (pick another above).`),
    ...rows);
}

// -- head roles ----------------------------------------------------------------------------
function renderRoles() {
  $("#gpt-roles").replaceChildren(
    el("p", {}, "One definition on every text (Olsson et al. 2022): a head's previous-token " +
      "score is its mean weight on the character just before; its induction score, over the " +
      "characters that occurred earlier, its mean weight on the characters right after those " +
      "earlier occurrences (where an induction head looks, to copy what came next last time)."),
    el("div", { cls: "gpt-roles-cols" }, ["random", "text"].map((key) => roleBlock(
      roles[key], key === "random" ? "gpt-role" : "gpt-textrole", rolePick[key], (l, h) => {
        rolePick[key] = [l, h];
        renderRoles();
      }))));
}

/** The same scores on the learner's own prompt, so the list agrees with the pattern shown. */
function renderPromptRoles() {
  const r = last.prompt_roles;
  if (r.previous === null) {
    $("#gpt-promptroles").replaceChildren(el("p", { "data-testid": "gpt-promptrole-sentence" },
      "A prompt of 1 character has no previous character: type more to measure the heads " +
      "on it."));
    return;
  }
  const set = { previous_token: r.previous, induction: r.induction || r.previous.map((row) =>
    row.map(() => null)) };
  const flat = r.previous.flatMap((row, l) => row.map((v, h) => [v, l, h]))
    .sort((x, y) => y[0] - x[0]);
  const g = state.gpt;
  const grid = roleGrid(set, "gpt-promptrole", "on your prompt: previous-token · induction " +
    "score (click a head to open its pattern above)", openHead, [g.layer, g.head]);
  const n = last.chars.length;
  const [p, l, h] = flat[0];
  const sentence = `On your prompt, L${l}H${h} puts the most weight on the previous character: ` +
      `${fmt(p, 2)} on average over ${count(n - 1, "character")} (uniform attention would ` +
      `give ${fmt(r.chance_previous, 3)}). ` + (r.induction === null
      ? "No character of the prompt repeats, so no induction score."
      : `Over the ${count(r.n_induction, "character")} that occurred earlier, the highest ` +
        `induction score is ${fmt(Math.max(...r.induction.flat()), 2)} (uniform: ` +
        `${fmt(r.chance_induction, 3)}).`);
  $("#gpt-promptroles").replaceChildren(grid,
    el("p", { "data-testid": "gpt-promptrole-sentence" }, sentence));
}

export function mount(section) {
  root = section;
  const g = () => state.gpt;
  // the sections of this view that index.html leaves to it
  const after = (anchor, ...nodes) => anchor.after(...nodes);
  after($("#gpt-next").closest(".steps"),
    el("h3", {}, "Switch heads off: which ones make this prediction?"),
    el("p", { cls: "note" }, "Switch off any head, or a layer's whole attention, and the " +
      "model runs again without it: the bars above show each character's probability before " +
      "→ after (ablation, as TransformerLens does it)."),
    el("div", { id: "gpt-ablate", "data-testid": "gpt-ablate" }),
    el("div", { id: "gpt-effects-box", "data-testid": "gpt-effects-box" }),
    el("div", { id: "gpt-where", "data-testid": "gpt-where" }));
  $("#gpt-roles-wrap").append(el("h4", {}, "The same scores on your prompt"),
    el("div", { id: "gpt-promptroles", "data-testid": "gpt-promptroles" }));
  mountInduction(section, $("#gpt-roles-wrap"));
  mountOwn(section, $("#gpt-circuit"));
  mountScale($("#gpt-generation"));
  $("#gpt-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if ($("#gpt-prompt").value !== g().prompt) root.dataset.stale = "1"; // until it is answered
    g().prompt = $("#gpt-prompt").value;
    g().steps = 0;
    writeURL();
    show();
  });
  $("#gpt-temperature").addEventListener("input", () => {
    g().temperature = Number($("#gpt-temperature").value);
    $("#gpt-temperature-value").textContent = fmt(g().temperature, 2);
    writeURL();
    sendPredict();
    sendGeneration();
  });
  $("#gpt-step").addEventListener("click", () => {
    const room = (last ? last.context : 64) - g().prompt.length + 1;
    g().steps = Math.min(g().steps + 1, room);
    writeURL();
    sendGeneration();
  });
  $("#gpt-reset").addEventListener("click", () => {
    g().steps = 0;
    g().seed += 1;
    writeURL();
    sendGeneration();
  });
}

export function sync() {}

// View 10's induction model (qkv.tasks.induction: 2 attention-only layers): its phase change
// during training (POST /api/gpt/induction), and the model live — the learner's prompt or a
// repeated random string through it, a head's pattern, the next-character bars, with heads
// switched off and heads taken out of another head's queries, keys or values (POST
// /api/gpt/circuit and /api/gpt/circuit/table, computed by qkv.tasks.circuits). The circuit
// controls are gpt/circuit.js; this module draws the rest and writes its sentences from the
// numbers it is sent.
import { Channel } from "../core/api.js";
import { PALETTE, lineChart } from "../core/chart.js";
import { announce, el, fmt } from "../core/dom.js";
import { legend } from "../core/legend.js";
import { defineState, state, writeURL } from "../core/state.js";
import { controls, headName, offSentence, parsePath, tableSentence, task } from "./circuit.js";
import { bar, causal, count, heatmap, pct, show1 } from "./draw.js";
import { roleGrid } from "./roles.js";

const VIEW = "gpt";
// a random string followed by the start of itself: the last "j" occurred once before
const PROMPT = "ROMEO: qvzkwjxbtg. ROMEO: qvzkwj";
defineState("circuit", { prompt: PROMPT, off: [], paths: [], pick: null, target: [1, 0],
  random: 0 });

let root;
const $ = (sel) => root.querySelector(sel);
let phase = null; // /api/gpt/induction
let gptRoles = null; // /api/gpt/roles' random set: what the GPT above has
let rolePick = null;
let table = null; // /api/gpt/circuit/table
let answer = null; // /api/gpt/circuit
let sent = null; // the last circuit request asked, as JSON

const circuitBody = () => {
  const c = state.circuit;
  return { prompt: c.prompt,
    off: c.off.map((k) => String(k).split(".").map(Number)).filter((x) => x.length === 2)
      .map(([layer, head]) => ({ layer, head })),
    paths: c.paths.map(parsePath).filter(Boolean).map((p) => ({
      source: { layer: p.source[0], head: p.source[1] },
      target: { layer: p.target[0], head: p.target[1] }, input: p.input })) };
};

const phaseChannel = new Channel(VIEW, "/api/gpt/induction", (data) => {
  phase = data;
  renderPhase();
}, (err) => {
  $("#gpt-induction").replaceChildren(el("p", { cls: "note" },
    `The attention-only model is not shown: ${err.message}`));
});
const tableChannel = new Channel(VIEW, "/api/gpt/circuit/table", (data) => {
  table = data;
  renderControls();
  if (answer) renderRun();
});
const circuitChannel = new Channel(VIEW, "/api/gpt/circuit", (data, body) => {
  // the latest input wins: an answer for an older prompt or older switches is not drawn
  if (JSON.stringify(body) !== JSON.stringify(circuitBody())) return;
  answer = data;
  delete $("#gpt-circuit").dataset.stale;
  renderRun();
}, () => { sent = null; }); // a refused run may be asked again

/** The GPT's own roles on random strings (for the sentence that compares the two models). */
export function setGptRoles(roles) {
  gptRoles = roles;
  if (phase) renderPhase();
}

/** Ask for the run of the current prompt and switches, unless it was the last one asked: a
 * success clears the view's error banner, so an unchanged run is not asked again (the GPT's
 * own refused prompt keeps its words). */
function sendCircuit() {
  const body = circuitBody();
  if (JSON.stringify(body) === sent) return;
  sent = JSON.stringify(body);
  circuitChannel.send(body);
}

export function show() {
  $("#gpt-circ-prompt").value = state.circuit.prompt;
  if (!phase) phaseChannel.send({});
  if (!table) tableChannel.send({});
  else renderControls();
  sendCircuit();
}

function changed() {
  writeURL();
  renderControls();
  $("#gpt-circuit").dataset.stale = "1"; // until the run is answered
  sendCircuit();
}

/** The head whose pattern is shown: the learner's pick, else the strongest induction head. */
function picked() {
  const c = state.circuit;
  if (c.pick) return c.pick;
  if (!table) return [1, 0];
  const last = table.layers - 1, row = table.base.induction[last];
  return [last, row.indexOf(Math.max(...row))];
}

function renderRun() {
  const a = answer, [l, h] = picked(), n = a.chars.length;
  const p = [l, h], name = headName(p);
  const picker = el("table", { cls: "gpt-grid", "data-testid": "gpt-circ-picker" }, [
    el("caption", {}, "show a head's pattern"),
    ...Array.from({ length: a.layers }, (_, li) => el("tr", {}, [
      el("th", { scope: "row" }, `layer ${li}`),
      ...Array.from({ length: a.heads }, (_, hi) => {
        const b = el("button", { type: "button", "data-testid": `gpt-circ-head-${li}-${hi}`,
          "aria-pressed": li === l && hi === h ? "true" : "false" }, `L${li}H${hi}`);
        b.addEventListener("click", () => {
          state.circuit.pick = [li, hi];
          writeURL();
          renderRun();
          announce(`L${li}H${hi}'s pattern is shown`);
        });
        return el("td", {}, b);
      })]))]);
  const changedBy = a.labels.length ? ` with ${a.labels.join(", ")}` : "";
  const cp = a.copying;
  let copy;
  if (cp.copied === null) {
    copy = `The last character “${show1(cp.char)}” has not occurred before in the prompt: ` +
      "there is nothing to copy. Type a prompt that repeats, or press “Repeat a random string”.";
  } else {
    const j = cp.earlier[cp.earlier.length - 1], k = cp.keys[cp.keys.length - 1];
    const wb = cp.weight_before[l][h], wa = cp.weight_after[l][h];
    copy = `The last character “${show1(cp.char)}” occurred before (most recently at ` +
      `position ${j}); after it came “${show1(cp.copied)}” (position ${k}), what copying ` +
      `predicts. ${name} puts ${fmt(wb, 3)} of its weight on ` + (cp.keys.length === 1
      ? "that position" : `the ${cp.keys.length} positions right after the earlier ` +
        "occurrences") + `, and the model gives “${show1(cp.copied)}” ` +
      `${pct(cp.p_before)}` + (a.labels.length
      ? `; ${changedBy.trim()}: ${fmt(wa, 3)} and ${pct(cp.p_after)}.` : ".");
  }
  const r = a.repeat;
  const repeat = r.n === 0 ? "No pair of characters of the prompt repeats, so no character " +
    "is predictable by copying."
    : `On the ${count(r.n, "character")} of the prompt that copying would get right (those ` +
      "that follow the same character as they did earlier in the prompt), the loss is " +
      `${fmt(r.before, 2)} nats a character` +
      (a.labels.length ? ` intact, ${fmt(r.after, 2)}${changedBy}.` : ".");
  const rows = a.next.chars.map((c, i) => {
    const cells = [el("code", { cls: "gpt-bar-char" }, show1(c)), bar(a.next.probs[i], "before"),
      el("span", {}, pct(a.next.probs[i]))];
    if (a.labels.length) {
      cells.push(el("span", { cls: "note" }, "→"), bar(a.next.after[i], "after"),
        el("span", { "data-testid": `gpt-circ-after-${i}`, "data-value": a.next.after[i] },
          pct(a.next.after[i])));
    }
    return el("div", { cls: "gpt-bar-row", "data-testid": `gpt-circ-next-${i}`,
      "data-value": a.next.probs[i] }, cells);
  });
  // with a cut, the intact pattern beside the cut one: the change is the lesson
  const side = (title, testid, weights, words) => {
    const box = el("div", { cls: "gpt-roleset" }, [el("h4", testid ? { "data-testid": testid }
      : {}, title), heatmap(weights, a.allowed, a.chars, a.chars, words.testid, words.label)]);
    box.style.flex = "1 1 320px"; // side by side where two fit, one above the other on a phone
    return box;
  };
  const maps = [side(a.labels.length ? `${name}${changedBy}` : `${name} on your prompt`,
    "gpt-circ-title", a.weights[l][h], { testid: "gpt-circ-cell",
      label: `the induction model's ${name} on the prompt${changedBy}` })];
  if (a.labels.length) {
    maps.unshift(side(`${name} intact`, null, a.intact_weights[l][h], {
      testid: "gpt-circ-intact-cell", label: `the induction model's ${name} on the prompt, ` +
        "intact" }));
  }
  $("#gpt-circ-run").replaceChildren(picker, el("p", { cls: "note" }, "Row i of a pattern is " +
    "how character i spreads its attention over characters 0…i."),
  el("div", { cls: "gpt-roles-cols" }, maps),
    legend("gpt-circ-legend"),
    el("p", { "data-testid": "gpt-circ-copy" }, copy),
    el("p", { "data-testid": "gpt-circ-repeat" }, repeat),
    el("h4", {}, `next character at T = 1 (the ${rows.length} most likely, intact` +
      (a.labels.length ? ` → ${changedBy.trim()})` : ")")),
    el("div", { cls: "gpt-bars" }, rows));
}

function renderControls() {
  if (!table) return;
  const c = state.circuit, t = task(table, c);
  const box = $('[data-testid="gpt-circ-task"]');
  box.textContent = t.text;
  box.classList.toggle("done", t.done);
  $("#gpt-circ-controls").replaceChildren(...controls(table, c, changed),
    el("p", { "data-testid": "gpt-circ-off-sentence" }, offSentence(table)),
    el("p", { "data-testid": "gpt-circ-table-sentence" }, tableSentence(table, c.target)));
}

/** A random string of half the context, followed by itself (the press count is its seed). */
function randomRepeat() {
  let s = (state.circuit.random * 2654435761 + 12345) >>> 0; // mulberry32: reproducible
  const next = () => {
    s = (s + 0x6D2B79F5) >>> 0;
    let t = Math.imul(s ^ (s >>> 15), 1 | s);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  const chars = table.alphabet.filter((ch) => ch !== "\n");
  const half = Math.floor(table.context / 2);
  const first = Array.from({ length: half }, () => chars[Math.floor(next() * chars.length)]);
  return first.join("") + first.join("");
}

// -- the phase change (the shipped training history) --------------------------------------------
/** What the GPT above has, from its measured roles on the repeated random sequences. */
function aboveSays() {
  if (!gptRoles) return "";
  const r = gptRoles, t = phase.threshold; // the library's INDUCTION
  const flat = r.induction.flatMap((row, l) => row.map((v, h) => [v, l, h]))
    .sort((a, b) => b[0] - a[0]);
  const [v, l, h] = flat[0];
  return v >= t
    ? `The GPT above has ${count(flat.filter((x) => x[0] >= t).length, "head")} with an ` +
      `induction score ≥ ${t} (strongest L${l}H${h}, ${fmt(v, 2)}).`
    : `The GPT above has no induction head: on ${r.what}, its highest induction score is ` +
      `L${l}H${h}'s ${fmt(v, 3)}, where uniform attention would give ` +
      `${fmt(r.chance_induction, 3)}.`;
}

function renderPhase() {
  const d = phase;
  const steps = d.history.map((r) => r.step);
  const xTicks = [0, ...[0.25, 0.5, 0.75, 1].map((f) => Math.round(f * steps[steps.length - 1]))];
  // a little room past the last step, so its tick's label is not cut at the edge
  const x = { label: "training step", domain: [0, 1.04 * steps[steps.length - 1]], ticks: xTicks,
    format: (v) => String(v) };
  const marks = d.phase.step === null ? [] : [{ x: d.phase.step, label: `step ${d.phase.step}` }];
  const maxLoss = Math.max(...d.history.map((r) => r.val));
  // the charts' own width is the room they have, so their 13 px text is not scaled down
  const width = Math.max(300, Math.min(520, $("#gpt-induction").clientWidth || 520));
  const loss = lineChart({ testid: "gpt-ind-loss", label: "held-out loss against training step",
    width, height: 240, x,
    y: { label: "loss (nats)", domain: [0, Math.ceil(maxLoss)], ticks: Array.from(
      { length: Math.ceil(maxLoss) + 1 }, (_, i) => i), format: (v) => String(v) },
    series: [
      { name: "all positions", color: PALETTE[0], points: d.history.map((r) => ({ x: r.step,
        y: r.val, title: `step ${r.step}: ${fmt(r.val, 3)}` })) },
      { name: "repeated positions", color: PALETTE[1], dash: "5 3", points: d.history.map(
        (r) => ({ x: r.step, y: r.repeat, title: `step ${r.step}: ${fmt(r.repeat, 3)}` })) }],
    marks });
  const score = lineChart({ testid: "gpt-ind-score", label: "head scores against training step",
    width, height: 240, x,
    y: { label: "score", domain: [0, 1], ticks: [0, 0.25, 0.5, 0.75, 1],
      format: (v) => fmt(v, 2) },
    series: [
      { name: "best layer-1 induction score", color: PALETTE[2], points: d.history.map((r) =>
        ({ x: r.step, y: r.induction, title: `step ${r.step}: ${fmt(r.induction, 3)}` })) },
      { name: "best layer-0 previous-token score", color: PALETTE[3], dash: "5 3",
        points: d.history.map((r) => ({ x: r.step, y: r.previous,
          title: `step ${r.step}: ${fmt(r.previous, 3)}` })) }],
    refY: { value: d.threshold, label: `induction head ≥ ${d.threshold}` }, marks });
  const first = d.history[0], end = d.history[d.history.length - 1];
  const ph = d.phase;
  const sentence = (ph.step === null
    ? `In ${d.steps} steps no layer-1 head reached an induction score of ${d.threshold}: ` +
      `${fmt(end.induction, 3)} at the end.`
    : `The best layer-1 induction score stayed near ${fmt(first.induction, 3)} and then ` +
      `reached ${fmt(ph.induction_at, 3)} at step ${ph.step} (${fmt(end.induction, 3)} at ` +
      `step ${end.step}), while the best layer-0 previous-token score rose to ` +
      `${fmt(end.previous, 3)}.`) +
    ` The loss on the repeated positions fell most between steps ${ph.steepest_from} and ` +
    `${ph.steepest_to}: ${fmt(ph.repeat_from, 3)} → ${fmt(ph.repeat_to, 3)} — the phase change.`;
  // its two roles' heads on a repeated random sequence
  const best = (m, l) => m[l].reduce((b, v, h) => (v > m[l][b] ? h : b), 0);
  const ind = [d.layers - 1, best(d.random.induction, d.layers - 1)];
  const prev = [0, best(d.random.previous_token, 0)];
  const pick = rolePick || ind;
  const set = d.random;
  const grid = roleGrid(set, "gpt-indrole", `on ${set.what}: previous-token · induction score ` +
    "(click a head for its pattern)", (l, h) => { rolePick = [l, h]; renderPhase(); }, pick);
  $("#gpt-induction").replaceChildren(
    el("p", { "data-testid": "gpt-ind-intro" }, `${aboveSays()} Olsson et al. saw induction ` +
      "heads form in small attention-only models, suddenly, with two layers: a layer-0 head " +
      "that reads the previous character feeds a layer-1 head that finds the earlier copy of " +
      `the current character and reads what came after it. This one has ${d.layers} ` +
      `attention-only layers × ${d.heads} heads, ${d.width} wide, ` +
      `${d.params.toLocaleString("en")} parameters, trained for ${d.steps} steps ` +
      `(${fmt(d.elapsed, 0)} s of training on a shared 2-core machine) on windows of text ` +
      "with repeats."),
    el("div", { cls: "gpt-ind-charts" }, [loss, score]),
    el("p", {}, ["Reproduce it: ", el("code", { "data-testid": "gpt-ind-command" }, d.command)]),
    el("p", { "data-testid": "gpt-ind-sentence" }, sentence),
    grid, el("p", { "data-testid": "gpt-indrole-sentence" }, set.sentence),
    el("p", { cls: "note" }, `Its induction head is L${ind[0]}H${ind[1]} (score ` +
      `${fmt(set.induction[ind[0]][ind[1]], 3)}); its previous-token head L${prev[0]}H${prev[1]}` +
      ` (${fmt(set.previous_token[prev[0]][prev[1]], 3)}). In the second copy the induction ` +
      "head's weight runs along a line one step right of the earlier copy."),
    el("h4", { "data-testid": "gpt-indrole-title" }, `layer ${pick[0]} · head ${pick[1]} on ` +
      "the first repeated random sequence"),
    heatmap(set.example_weights[pick[0]][pick[1]], causal(set.example.length), set.example,
      set.example, "gpt-ind-cell", `the induction model's layer ${pick[0]} head ${pick[1]} on ` +
      "a repeated random sequence"),
    el("p", { "data-testid": "gpt-indtext-sentence" }, d.text.sentence));
}

/** Put the induction model's sections after `anchor` (an element of view 10). */
export function mount(section, anchor) {
  root = section;
  const form = el("form", { id: "gpt-circ-form", cls: "controls" }, [
    el("label", { for: "gpt-circ-prompt" }, "prompt for the induction model (at most 48 " +
      "characters)"),
    el("input", { id: "gpt-circ-prompt", "data-testid": "gpt-circ-prompt", type: "text",
      maxlength: 48, size: 40, spellcheck: "false" }),
    el("button", { type: "submit", "data-testid": "gpt-circ-run-button" }, "Run"),
    el("button", { type: "button", id: "gpt-circ-random", "data-testid": "gpt-circ-random" },
      "Repeat a random string")]);
  anchor.after(
    el("h3", {}, "An induction head forming: a two-layer attention-only model"),
    el("div", { id: "gpt-induction", "data-testid": "gpt-induction" }),
    el("h3", {}, "The circuit behind copying: type into the induction model, cut its heads " +
      "apart"),
    el("div", { id: "gpt-circuit", "data-testid": "gpt-circuit" }, [
      el("p", { cls: "note" }, "Switch a head off and everything after it loses what it " +
        "wrote. A circuit shows when the cut is narrower: every head reads the layers below it " +
        "three times — for its queries, its keys and its values — so one head can be taken " +
        "out of another head's keys alone. Each button below runs the model again without " +
        "that path; its label is what the cut does on the random strings."),
      form, el("div", { id: "gpt-circ-run", "data-testid": "gpt-circ-run" }),
      el("div", { id: "gpt-circ-controls", "data-testid": "gpt-circ-controls" }),
      el("div", { cls: "lesson", role: "group", "aria-labelledby": "gpt-circ-task-title" }, [
        el("h4", { id: "gpt-circ-task-title" }, "Task: with one cut — one head out of one " +
          "input of a later head — make the random strings' second copy cost the most"),
        el("p", { cls: "feedback", "data-testid": "gpt-circ-task", "aria-live": "polite" })]),
    ]));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    state.circuit.prompt = $("#gpt-circ-prompt").value;
    changed();
  });
  $("#gpt-circ-random").addEventListener("click", () => {
    if (!table) return;
    state.circuit.random += 1;
    state.circuit.prompt = randomRepeat();
    $("#gpt-circ-prompt").value = state.circuit.prompt;
    changed();
  });
}

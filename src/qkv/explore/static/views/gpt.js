// View 10 · A GPT: qkv's own character-level GPT (trained by `qkv train gpt`, shipped) reading
// the past through a causal mask to predict the next character. Every number comes from the
// server (POST /api/gpt/predict, /api/gpt/generate, GET /api/gpt/roles), computed by
// qkv.tasks.gpt_watch; this module only draws it.
import { Channel } from "../core/api.js";
import { announce, el, fmt, svg } from "../core/dom.js";
import { COLORS, heat, legend } from "../core/legend.js";
import { defineState, state, writeURL } from "../core/state.js";

export const name = "gpt";
export const READS = {
  "/api/gpt/predict": ["chars", "layers", "heads", "context", "weights", "allowed",
    "temperature", "next.chars", "next.probs", "attribution.char", "attribution.logit",
    "attribution.heads", "attribution.mlps", "attribution.embeddings", "attribution.biases"],
  "/api/gpt/generate": ["prompt", "chars", "probs", "weights", "context"],
  "/api/gpt/roles": ["previous_token", "induction", "half", "n_sequences", "sentence",
    "example", "example_weights"],
};

defineState("gpt", { prompt: "ROMEO.\nI will not", temperature: 1, layer: 0, head: 0,
  steps: 0, seed: 0 });

let root;
const $ = (sel) => root.querySelector(sel);
const VISIBLE = { "\n": "⏎", " ": "␣", "\t": "⇥" };
const show1 = (c) => VISIBLE[c] || c;
let last = null; // the last /api/gpt/predict answer
let roles = null; // /api/gpt/roles (fixed: the model is fixed)
let rolePick = null; // [layer, head] whose role pattern is shown

const predictChannel = new Channel(name, "/api/gpt/predict", (data) => {
  last = data;
  delete root.dataset.stale; // what is drawn is this prompt's again
  renderPrompt();
  renderHeads();
  renderNext();
  renderTask();
});
const generateChannel = new Channel(name, "/api/gpt/generate", renderGeneration);
const rolesChannel = new Channel(name, "/api/gpt/roles", (data) => {
  roles = data;
  renderRoles();
});

export function show() {
  const g = state.gpt;
  $("#gpt-prompt").value = g.prompt;
  $("#gpt-temperature").value = g.temperature;
  $("#gpt-temperature-value").textContent = fmt(g.temperature, 2);
  predictChannel.send({ prompt: g.prompt, temperature: g.temperature });
  sendGeneration();
  if (!roles) rolesChannel.send({});
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

/** One head's weights as an SVG heat map; masked (future) cells grey with ×, never "0". */
function heatmap(weights, allowed, rows, cols, testid, label) {
  const n = rows.length, m = cols.length;
  const cell = Math.max(5, Math.min(18, Math.floor(300 / Math.max(n, m))));
  const margin = 14;
  const map = svg("svg", { width: margin + m * cell + 2, height: margin + n * cell + 2,
    cls: "heatmap", role: "img", "data-testid": testid, "aria-label": label });
  weights.forEach((row, i) => row.forEach((w, j) => {
    const ok = allowed ? allowed[i][j] : true;
    const rect = svg("rect", { x: margin + j * cell, y: margin + i * cell, width: cell,
      height: cell, cls: ok ? "hcell" : "hcell masked", "data-testid": `${testid}-${i}-${j}`,
      "data-value": w, "data-allowed": ok ? "1" : "0" });
    rect.style.fill = ok ? heat(w) : COLORS.masked;
    const tip = svg("title");
    tip.textContent = `“${show1(rows[i])}” (${i}) → “${show1(cols[j])}” (${j}): ` +
      (ok ? fmt(w) : "masked: a future character");
    rect.append(tip);
    map.append(rect);
    if (!ok && cell >= 9) {
      const mark = svg("text", { x: margin + j * cell + cell / 2, y: margin + i * cell + cell * 0.75,
        cls: "mask-mark", "text-anchor": "middle", "aria-hidden": "true" });
      mark.textContent = COLORS.masked_mark;
      map.append(mark);
    }
  }));
  if (cell >= 9) {
    cols.forEach((c, j) => {
      const t = svg("text", { x: margin + j * cell + cell / 2, y: margin - 3, cls: "tok-label",
        "text-anchor": "middle" });
      t.textContent = show1(c);
      map.append(t);
    });
  }
  return el("div", { cls: "scroll" }, map);
}

function renderPrompt() {
  const chips = last.chars.map((c, i) => el("span", { cls: "gpt-char",
    "data-testid": `gpt-char-${i}`, title: `position ${i}` }, show1(c)));
  $("#gpt-chars").replaceChildren(el("p", {}, [`${last.chars.length} of ${last.context} ` +
    "characters (⏎ newline, ␣ space): "]), el("div", { cls: "gpt-chars" }, chips));
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
        b.addEventListener("click", () => { g.layer = l; g.head = h; writeURL(); renderHeads();
          renderGenerationHead(); });
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
    el("p", { "data-testid": "gpt-heat-sentence" }, `${masked} of ${n * n} pairs are masked ` +
      `(a key after its query). The last character “${show1(last.chars[n - 1])}” puts its ` +
      `largest weight, ${fmt(top[0], 3)}, on “${show1(last.chars[top[1]])}” at position ${top[1]}.`));
}

function renderNext() {
  const bars = last.next.chars.map((c, i) => {
    const p = last.next.probs[i];
    const bar = el("span", { cls: "gpt-bar" });
    bar.style.width = `${Math.max(1, Math.round(p * 200))}px`;
    return el("div", { cls: "gpt-bar-row", "data-testid": `gpt-next-${i}`, "data-value": p }, [
      el("code", { cls: "gpt-bar-char" }, show1(c)), bar, el("span", {}, `${fmt(p * 100, 2)}%`)]);
  });
  const a = last.attribution;
  const flat = a.heads.flatMap((row, l) => row.map((v, h) => [v, l, h]))
    .sort((x, y) => y[0] - x[0]);
  const best = flat[0], worst = flat[flat.length - 1];
  const headsSum = flat.reduce((s, x) => s + x[0], 0);
  const cells = a.heads.map((row, l) => el("tr", {}, [el("th", { scope: "row" }, String(l)),
    ...row.map((v, h) => el("td", { "data-testid": `gpt-push-${l}-${h}`, "data-value": v },
      `${v >= 0 ? "+" : ""}${fmt(v, 2)}`))]));
  $("#gpt-next").replaceChildren(
    el("h4", {}, `next character at T = ${fmt(last.temperature, 2)} (the ${bars.length} most ` +
      "likely)"),
    el("div", { cls: "gpt-bars" }, bars),
    el("h4", {}, `why “${show1(a.char)}”? each head's direct push on its logit`),
    el("p", { "data-testid": "gpt-why" }, `logit ${fmt(a.logit, 2)} = heads ` +
      `${fmt(headsSum, 2)} + MLPs ${fmt(a.mlps, 2)} + embeddings ${fmt(a.embeddings, 2)} + ` +
      `biases ${fmt(a.biases, 2)}. Pushing it most: L${best[1]}H${best[2]} ` +
      `(${fmt(best[0], 2)}); against it most: L${worst[1]}H${worst[2]} (${fmt(worst[0], 2)}).`),
    el("table", { cls: "gpt-grid", "data-testid": "gpt-push" }, [
      el("tr", {}, [el("th", {}, "layer"), ...a.heads[0].map((_, h) =>
        el("th", { scope: "col" }, `head ${h}`))]), ...cells]));
  announce(`most likely next character ${show1(last.next.chars[0])}, ` +
    `${fmt(last.next.probs[0] * 100, 1)}%`);
}

const SURE = 0.9; // the task: the most likely next character gets more than this

/** "Find a prompt where the most likely next character gets over 90% at temperature 1", from
 * the returned next-character probabilities and their temperature. */
function renderTask() {
  const box = $('[data-testid="task-sure"]');
  const c = last.next.chars[0], p = last.next.probs[0];
  const said = `after “${last.chars.map(show1).join("")}” the most likely next character, ` +
    `“${show1(c)}”, gets ${fmt(p * 100, 1)}% at T = ${fmt(last.temperature, 2)}`;
  const atOne = last.temperature === 1;
  const done = atOne && p > SURE;
  box.classList.toggle("done", done);
  box.textContent = done ? `✓ ${said[0].toUpperCase()}${said.slice(1)}.`
    : `Not yet: ${said}` + (atOne ? `; the task needs more than ${100 * SURE}%.`
      : `; the task counts only T = 1 (a lower temperature sharpens every prompt's bars).`);
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
        `read the ${n} cached keys, most “${show1(text[top[1]])}” at ${top[1]} (${fmt(top[0], 3)})`),
      el("div", { cls: "gpt-chars" }, chips)]);
  });
  const n0 = d.prompt.length;
  $("#gpt-generation").replaceChildren(
    el("p", { "data-testid": "gpt-text" }, ["text: ", el("code", {}, text.map(show1).join(""))]),
    el("p", { cls: "note" }, `Through the KV cache each step projects only the new character ` +
      `and its query reads the cached keys: ${n0} keys at the first step, ` +
      `${n0 + d.chars.length - 1} at the last — O(n·d) per step, not a full O(n²·d) pass. ` +
      `Shown: layer ${g.layer}, head ${g.head} (pick another above).`),
    ...rows);
}

function renderRoles() {
  const r = roles;
  const color = (v) => heat(Math.min(1, v));
  const table = el("table", { cls: "gpt-grid", "data-testid": "gpt-roles" }, [
    el("caption", {}, "previous-token · induction score (click a head for its pattern)"),
    el("tr", {}, [el("th", {}, "layer"), ...r.previous_token[0].map((_, h) =>
      el("th", { scope: "col" }, `head ${h}`))]),
    ...r.previous_token.map((row, l) => el("tr", {}, [el("th", { scope: "row" }, String(l)),
      ...row.map((p, h) => {
        const b = el("button", { type: "button", "data-testid": `gpt-role-${l}-${h}`,
          "data-prev": p, "data-induction": r.induction[l][h] },
        `${fmt(p, 2)} · ${fmt(r.induction[l][h], 2)}`);
        b.style.background = color(p);
        b.style.color = p > COLORS.ink_threshold ? COLORS.ink_light : COLORS.ink_dark;
        b.addEventListener("click", () => { rolePick = [l, h]; renderRolePattern(); });
        return el("td", {}, b);
      })])),
  ]);
  $("#gpt-roles").replaceChildren(
    el("p", {}, `Measured on ${r.n_sequences} random sequences of ${r.half} characters, each ` +
      "followed by itself (Olsson et al. 2022): a previous-token head puts its weight on the " +
      "character just before; an induction head, in the second copy, on the character after " +
      "the current one's earlier occurrence."),
    table, el("p", { "data-testid": "gpt-roles-sentence" }, r.sentence),
    el("div", { id: "gpt-role-pattern" }));
  renderRolePattern();
}

function renderRolePattern() {
  const [l, h] = rolePick || [0, 0];
  const r = roles, n = r.example.length;
  const allowed = Array.from({ length: n }, (_, i) => Array.from({ length: n }, (_, j) => j <= i));
  $("#gpt-role-pattern").replaceChildren(
    el("h4", { "data-testid": "gpt-role-title" }, `layer ${l} · head ${h} on the first random ` +
      `sequence (previous-token ${fmt(r.previous_token[l][h], 3)}, induction ` +
      `${fmt(r.induction[l][h], 3)})`),
    heatmap(r.example_weights[l][h], allowed, r.example, r.example, "gpt-role-cell",
      `layer ${l} head ${h} on a repeated random sequence`));
}

export function mount(section) {
  root = section;
  const g = () => state.gpt;
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
    predictChannel.send({ prompt: g().prompt, temperature: g().temperature });
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

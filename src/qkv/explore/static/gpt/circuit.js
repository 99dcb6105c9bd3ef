// The circuit controls of view 10's induction model: switch any head off, or take one head out
// of *another head's* queries, keys or values only (Q-, K-, V-composition; Elhage et al. 2021),
// each switch showing what it does on the repeated random strings (POST /api/gpt/circuit/table,
// computed by qkv.tasks.circuits), and the task whose ✓ is the best of every cut the controls
// can make. The sentences are written from those numbers; nothing here computes attention.
import { el, fmt } from "../core/dom.js";
import { count, signed } from "./draw.js";

export const WORDS = { q: "queries", k: "keys", v: "values" };
export const headName = ([l, h]) => `L${l}H${h}`;
/** A path's key in the page's state: "0.0>1.0:k" is L0H0 out of L1H0's keys. */
export const pathKey = (s, t, input) => `${s[0]}.${s[1]}>${t[0]}.${t[1]}:${input}`;
export function parsePath(key) {
  const m = /^(\d+)\.(\d+)>(\d+)\.(\d+):([qkv])$/.exec(String(key));
  return m ? { source: [+m[1], +m[2]], target: [+m[3], +m[4]], input: m[5] } : null;
}
const same = (a, b) => a[0] === b[0] && a[1] === b[1];
/** Each path of the table with its rise in the second-copy loss, largest first. */
export function ranked(table) {
  return table.paths.map((p) => ({ ...p, rise: p.copy_loss - table.base.copy_loss }))
    .sort((a, b) => b.rise - a.rise);
}

function toggleButton(pressed, testid, text, label, onClick) {
  const b = el("button", { type: "button", "data-testid": testid, "aria-label": label,
    "aria-pressed": pressed ? "true" : "false", cls: pressed ? "off" : "" }, text);
  b.addEventListener("click", onClick);
  return b;
}

/** The switches: heads off, and for the picked target head every earlier head × its three
 * inputs. c is state.circuit; change() is called after c changes. */
export function controls(table, c, change) {
  const offKeys = c.off.map(String);
  const flip = (list, key) => (list.includes(key) ? list.filter((k) => k !== key)
    : [...list, key]);
  const offRows = Array.from({ length: table.layers }, (_, l) => el("tr", {}, [
    el("th", { scope: "row" }, String(l)),
    ...Array.from({ length: table.heads }, (_, h) => {
      const key = `${l}.${h}`, on = offKeys.includes(key);
      return el("td", {}, toggleButton(on, `gpt-circ-off-${l}-${h}`,
        on ? `L${l}H${h} off` : `L${l}H${h}`, `switch L${l}H${h} ${on ? "back on" : "off"}`,
        () => { c.off = flip(offKeys, key); change(); }));
    })]));
  const offTable = el("table", { cls: "gpt-grid", "data-testid": "gpt-circ-off" }, [
    el("caption", {}, "switch a head off (press again to switch it back on)"),
    el("tr", {}, [el("th", {}, "layer"), ...Array.from({ length: table.heads },
      (_, h) => el("th", { scope: "col" }, `head ${h}`))]), ...offRows]);
  const target = c.target;
  const select = el("select", { id: "gpt-circ-target", "data-testid": "gpt-circ-target" },
    Array.from({ length: (table.layers - 1) * table.heads }, (_, i) => {
      const t = [1 + Math.floor(i / table.heads), i % table.heads];
      const o = el("option", { value: `${t[0]}.${t[1]}` }, headName(t));
      o.selected = same(t, target);
      return o;
    }));
  select.addEventListener("change", () => {
    c.target = select.value.split(".").map(Number);
    change();
  });
  const byKey = new Map(ranked(table).map((p) => [pathKey(p.source, p.target, p.input), p]));
  const sources = table.paths.filter((p) => same(p.target, target) && p.input === "q")
    .map((p) => p.source);
  const pathRows = sources.map((s) => el("tr", {}, [el("th", { scope: "row" }, headName(s)),
    ...["q", "k", "v"].map((input) => {
      const key = pathKey(s, target, input), p = byKey.get(key);
      const on = c.paths.map(String).includes(key);
      const ind = fmt(p.induction[target[0]][target[1]], 2);
      return el("td", {}, toggleButton(on, `gpt-circ-path-${s[0]}-${s[1]}-${input}`,
        `${on ? "out · " : ""}${ind} · ${signed(p.rise, 2)}`,
        `${on ? "put back" : "take out"} ${headName(s)} from ${headName(target)}'s ` +
        `${WORDS[input]}: on the random strings ${headName(target)}'s induction score ` +
        `becomes ${ind} and the second-copy loss changes by ${signed(p.rise, 2)} nats`,
        () => { c.paths = flip(c.paths.map(String), key); change(); }));
    })]));
  const pathTable = el("table", { cls: "gpt-grid", "data-testid": "gpt-circ-paths" }, [
    el("caption", {}, `take a head out of ${headName(target)}'s queries, keys or values only:` +
      ` its induction score · the change in the second-copy loss (nats), on the random strings`),
    el("tr", {}, [el("th", {}, "taken out"), ...["q", "k", "v"].map((i) =>
      el("th", { scope: "col" }, `${headName(target)}'s ${WORDS[i]}`))]), ...pathRows]);
  const reset = el("button", { type: "button", "data-testid": "gpt-circ-reset" },
    "Put everything back");
  reset.disabled = c.off.length === 0 && c.paths.length === 0;
  reset.addEventListener("click", () => { c.off = []; c.paths = []; change(); });
  return [offTable, el("label", {}, ["the head that loses an input: ", select]), pathTable,
    reset];
}

/** What switching each head off alone does on the random strings. */
export function offSentence(table) {
  const rows = table.off.map((r) => ({ ...r, rise: r.copy_loss - table.base.copy_loss }))
    .sort((a, b) => b.rise - a.rise);
  const [a, b] = rows, z = rows[rows.length - 1];
  return `On ${table.n_sequences} random strings of ${table.half} characters, each followed ` +
    `by itself, the second copy costs ${fmt(table.base.copy_loss, 2)} nats a character ` +
    `(the first copy, which nothing predicts, ${fmt(table.base.first_loss, 2)}). Switched off ` +
    `alone, L${a.layer}H${a.head} raises it most (${signed(a.rise, 2)} nats), then ` +
    `L${b.layer}H${b.head} (${signed(b.rise, 2)}); L${z.layer}H${z.head} changes it least ` +
    `(${signed(z.rise, 2)}).`;
}

const KINDS = {
  k: (s, t) => `${t}'s keys read what ${s} wrote: K-composition.`,
  q: (s, t) => `${t}'s queries read what ${s} wrote: Q-composition.`,
  v: (s, t) => `What ${t} moves along comes from ${s}: V-composition.`,
};

/** Why K-composition makes an induction head — said only when the numbers show that circuit:
 * the target is an induction head and the source layer 0's strongest previous-token head. */
function inductionCircuit(table, source, target) {
  const prev = table.base.previous[0];
  const best = prev.indexOf(Math.max(...prev));
  if (source[0] !== 0 || source[1] !== best ||
      table.base.induction[target[0]][target[1]] < table.threshold) return "";
  const s = headName(source), t = headName(target);
  return ` ${s} is layer 0's strongest previous-token head (${fmt(prev[best], 2)} of its ` +
    `weight on the character just before): it writes into each position the character before ` +
    `it, and ${t}'s keys use that to find the position right after an earlier copy of the ` +
    "current character — the previous-token head feeding the induction head (Elhage et al. " +
    "2021; Olsson et al. 2022).";
}

/** For the target head: which earlier head, through which input, it depends on most. */
export function tableSentence(table, target) {
  const t = headName(target);
  const into = ranked(table).filter((p) => same(p.target, target));
  const top = into[0];
  const s = headName(top.source);
  const via = (input) => into.find((p) => same(p.source, top.source) && p.input === input);
  const base = table.base.induction[target[0]][target[1]];
  const role = base >= table.threshold ? `${t} is an induction head (score ` +
    `${fmt(base, 2)} ≥ ${table.threshold})` : `${t} is not an induction head (score ` +
    `${fmt(base, 2)} < ${table.threshold})`;
  return `${role}. Of the ${count(into.length, "cut")} into it, taking ${s} out of its ` +
    `${WORDS[top.input]} costs most: the second copy ${fmt(table.base.copy_loss, 2)} → ` +
    `${fmt(top.copy_loss, 2)} nats (${signed(top.rise, 2)}), ${t}'s induction score ` +
    `${fmt(base, 3)} → ${fmt(top.induction[target[0]][target[1]], 3)}. Out of its ` +
    ["q", "k", "v"].filter((i) => i !== top.input).map((i) =>
      `${WORDS[i]}: ${signed(via(i).rise, 2)}`).join("; out of its ") + ". " +
    (top.rise > 0 ? KINDS[top.input](s, t) + (top.input === "k"
      ? inductionCircuit(table, top.source, target) : "") : "No cut into it raises the loss.");
}

/** The task: one cut, the one that costs the second copy most of every cut the controls can
 * make (the oracle is the whole table, not the picked target). */
export function task(table, c) {
  const all = ranked(table);
  const best = all[0];
  const name = (p) => `${headName(p.source)} out of ${headName(p.target)}'s ${WORDS[p.input]}`;
  const cuts = c.paths.map(parsePath).filter(Boolean);
  if (cuts.length === 0 || c.off.length > 0 || cuts.length > 1) {
    const now = cuts.length || c.off.length ? ` (now ${count(cuts.length, "cut")} and ` +
      `${count(c.off.length, "head")} off)` : "";
    return { done: false, text: `Not yet: the task counts one cut alone, no head off${now}.` };
  }
  const key = pathKey(cuts[0].source, cuts[0].target, cuts[0].input);
  const mine = all.find((p) => pathKey(p.source, p.target, p.input) === key);
  const more = all.filter((p) => p.rise > mine.rise).length;
  if (more === 0) {
    return { done: true, text: `✓ ${name(mine)} raises the second-copy loss the most of all ` +
      `${all.length} cuts: ${fmt(table.base.copy_loss, 2)} → ${fmt(mine.copy_loss, 2)} nats ` +
      `(${signed(mine.rise, 2)}).` };
  }
  return { done: false, text: `Not yet: ${name(mine)} changes the second-copy loss by ` +
    `${signed(mine.rise, 2)} nats; ${count(more, "cut")} of the ${all.length} raise it more ` +
    `(the most: ${signed(best.rise, 2)}).` };
}

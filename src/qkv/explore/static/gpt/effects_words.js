// View 10's words about which heads matter for this prompt: one measure per sentence, each
// named in its sentence (issue 51: "L2H3 matters most (−4.4 points)" and "switching heads off
// ranks L0H1 first" ranked by two measures, probability and logit, and neither said which).
//   - probabilityWords: the chosen character's probability with each head switched off alone
//     (effects.drop = p_before − p_after, at T = 1): the largest fall, and the largest rise when
//     a head's removal raises it.
//   - logitWords: the chosen character's logit, two measures of it: the direct push
//     (attribution.heads) and the total effect of switching a head off (effects.total).
// Pure functions of the /api/gpt/predict answer, so tests can call them on any prompt.
import { fmt } from "../core/dom.js";

const VISIBLE = { "\n": "⏎", " ": "␣", "\t": "⇥" };
const shown = (c) => VISIBLE[c] || c;
const pct = (p) => `${fmt(100 * p, 1)}%`;
/** A change in probability, p_after − p_before, in percentage points: "−4.4 points". */
const points = (change) => {
  const size = fmt(Math.abs(100 * change), 1);
  return `${Number(size) === 0 ? "" : change < 0 ? "−" : "+"}${size} points`;
};
const heads = (grid) => grid.flatMap((row, l) => row.map((v, h) => ({ v, l, h })));
const name = ({ l, h }) => `L${l}H${h}`;

/** Heads ranked by the fall in probability when each is switched off alone, largest first. */
export function rankByProbability(e) {
  return heads(e.drop).sort((x, y) => y.v - x.v || x.l - y.l || x.h - y.h);
}

/** The probability sentence: which head's removal lowers the chosen character's probability
 * most, the next two, and which raises it most (when one does). */
export function probabilityWords(e) {
  const c = `“${shown(e.char)}”`;
  const ranked = rankByProbability(e);
  const top = ranked[0];
  const rise = ranked[ranked.length - 1];
  const after = (d) => pct(e.p_before - d);
  const out = [];
  if (top.v > 0) {
    const next = ranked.slice(1, 3).filter((x) => x.v > 0)
      .map((x) => `${name(x)} (${points(-x.v)})`);
    out.push(`Measured by ${c}'s probability (${pct(e.p_before)} at T = 1) with one head ` +
      `switched off: switching ${name(top)} off lowers it most, to ${after(top.v)} ` +
      `(${points(-top.v)})` + (next.length ? `; next ${next.join(", ")}.` : "."));
  } else {
    out.push(`Measured by ${c}'s probability (${pct(e.p_before)} at T = 1): no head, switched ` +
      "off alone, lowers it; each head's share is made up by the others.");
  }
  if (rise.v < 0) {
    out.push(`Switching ${name(rise)} off raises it most, to ${after(rise.v)} ` +
      `(${points(-rise.v)})` + (-rise.v > Math.max(top.v, 0)
      ? ": a larger change than any head's fall, so this head works against the prediction." : "."));
  }
  out.push("This ranking holds for this prompt only: which heads matter changes from prompt " +
    "to prompt (“where it matters” below finds each head's own prompt).");
  return out.join(" ");
}

/** The logit sentence: the direct push and the total effect, each named, and how often their
 * signs differ. */
export function logitWords(a, e) {
  const c = `“${shown(a.char)}”`;
  const top = (grid) => heads(grid).sort((x, y) => y.v - x.v || x.l - y.l || x.h - y.h)[0];
  const direct = top(a.heads);
  const total = top(e.total);
  let opposite = 0;
  a.heads.forEach((row, l) => row.forEach((v, h) => {
    if (Math.sign(v) !== Math.sign(e.total[l][h])) opposite += 1;
  }));
  const n = a.heads.length * a.heads[0].length;
  const same = direct.l === total.l && direct.h === total.h;
  return `Measured on ${c}'s logit instead, by two measures: the direct push (a head's output ` +
    `straight to the logit) is largest for ${name(direct)} (${fmt(direct.v, 2)}); the total ` +
    `effect (the logit's fall when the head is switched off, by every path) is largest for ` +
    `${name(total)} (${fmt(total.v, 2)}). ` +
    (same ? "The two logit measures agree on the first head" : "The two logit measures disagree on the first head") +
    ` and give opposite signs for ${opposite} of ${n} heads: a head's output also reaches the ` +
    "logit through the later heads and the MLPs (its indirect effect), which only switching it " +
    "off measures. Either can rank heads differently from the probability above, which also " +
    "moves with every other character's logit.";
}

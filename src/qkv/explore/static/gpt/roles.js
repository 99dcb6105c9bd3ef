// The role tables of view 10: every head's previous-token and induction scores (Olsson et al.
// 2022, one definition: qkv.tasks.gpt_watch.role_scores, computed by the server) as a layer ×
// head grid of buttons, and a picked head's pattern under it. Used for the GPT and for the
// induction model.
import { el, fmt } from "../core/dom.js";
import { COLORS, heat } from "../core/legend.js";
import { causal, heatmap } from "./draw.js";

/** A layer × head grid of "previous · induction" buttons; a click calls pick(l, h). */
export function roleGrid(set, testid, caption, pick, picked) {
  const ind = (l, h) => (set.induction[l][h] === null ? "–" : fmt(set.induction[l][h], 2));
  return el("table", { cls: "gpt-grid", "data-testid": testid }, [
    el("caption", {}, caption),
    el("tr", {}, [el("th", {}, "layer"), ...set.previous_token[0].map((_, h) =>
      el("th", { scope: "col" }, `head ${h}`))]),
    ...set.previous_token.map((row, l) => el("tr", {}, [el("th", { scope: "row" }, String(l)),
      ...row.map((p, h) => {
        const b = el("button", { type: "button", "data-testid": `${testid}-${l}-${h}`,
          "data-prev": p, "data-induction": set.induction[l][h],
          "aria-pressed": picked && picked[0] === l && picked[1] === h ? "true" : "false" },
        `${fmt(p, 2)} · ${ind(l, h)}`);
        b.style.background = heat(Math.min(1, Math.max(p, set.induction[l][h] || 0)));
        b.style.color = Math.max(p, set.induction[l][h] || 0) > COLORS.ink_threshold
          ? COLORS.ink_light : COLORS.ink_dark;
        b.addEventListener("click", () => pick(l, h));
        return el("td", {}, b);
      })])),
  ]);
}

/** One role set (random strings or text): its grid, its sentence, and the picked head's
 * pattern on the set's first sequence; onPick(l, h) when another head is picked. */
export function roleBlock(set, testid, picked, onPick) {
  const grid = roleGrid(set, testid, `on ${set.what}: previous-token · induction score ` +
    "(click a head for its pattern)", onPick, picked);
  const [l, h] = picked;
  const random = set.source === "random";
  return el("div", { cls: "gpt-roleset" }, [grid,
    el("p", { "data-testid": `${testid}-sentence` }, set.sentence),
    el("h4", { "data-testid": `${testid}-title` }, `layer ${l} · head ${h} on the first of ` +
      `the ${random ? "random sequences" : "windows"} (previous-token ` +
      `${fmt(set.previous_token[l][h], 3)}, induction ${set.induction[l][h] === null ? "–"
        : fmt(set.induction[l][h], 3)})`),
    heatmap(set.example_weights[l][h], causal(set.example.length), set.example, set.example,
      `${testid}-cell`, `layer ${l} head ${h} on ${random ? "a repeated random sequence"
        : "a window of the validation text"}`)]);
}

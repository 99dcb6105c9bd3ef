// View 6 · what "selective" selects (issue 49, item 4): on the learner's own key:value sequence,
// how much of each state-space model's state survives each token, per layer — the geometric mean
// of the decay exp(ΔA) that qkv.nn's S6 layer computes (POST /api/cost/recall, models.selection)
// — with words computed from those numbers, and one sentence from the shipped accuracy-by-pairs
// curves on why a fixed-size state still runs out of room.
// Pure functions of the answers, so the page and its tests read the same words.
import { el, scrollBox } from "../core/dom.js";
import { heat, ink } from "../core/legend.js";

const GOOD = 0.9; // the view's "answers well", as in cost.js
const pct = (a) => `${(100 * a).toFixed(0)}%`;
const kindLabel = (m) => `state-space, N = ${m.n_state}`;

/** Tokens until half the state is gone at this rate of keeping: ln ½ / ln kept. */
export const halfLife = (kept) => (kept >= 1 ? Infinity : Math.log(0.5) / Math.log(kept));
const halfWords = (kept) => {
  const h = halfLife(kept);
  return h === Infinity ? "none of it lost" : `half of it gone after ${h.toFixed(1)} tokens`;
};
/** A token as the strip labels it: k3 (a stored key), v17 (its value), ?3 (asked), · (blank). */
export const tokenLabel = (t) => ({ key: `k${t.number}`, value: `v${t.number}`,
  asked: `?${t.number}`, blank: "·" })[t.role];
/** Colour: how much of a halving happens at this token (full colour: half the state gone). */
const forgetting = (kept) => Math.min(1, Math.max(0, -Math.log(kept) / Math.log(2)));
const geomean = (xs) => Math.exp(xs.reduce((s, x) => s + Math.log(x), 0) / xs.length);

/** For one layer: the geometric-mean share kept per token while the pairs are read and while the
 * model is asked (the tokens after the pairs), and the token where it keeps least. */
export function layerSummary(tokens, layer) {
  const inPairs = tokens.map((t) => t.role === "key" || t.role === "value");
  const pairs = layer.kept.filter((_, i) => inPairs[i]);
  const after = layer.kept.filter((_, i) => !inPairs[i]);
  let least = 0;
  layer.kept.forEach((k, i) => { if (k < layer.kept[least]) least = i; });
  return { pairs: geomean(pairs), asked: after.length ? geomean(after) : null, least,
    contrast: after.length ? Math.log(geomean(after)) - Math.log(geomean(pairs)) : 0 };
}

/** One sentence per state-space model: the layer that tells the pairs and the questions apart
 * most, how much of its state it keeps per token in each, and where it keeps least. */
export function selectionWords(r) {
  return r.models.filter((m) => m.selection).map((m) => {
    const sums = m.selection.map((layer) => layerSummary(r.tokens, layer));
    const l = sums.reduce((b, s, i) => (Math.abs(s.contrast) > Math.abs(sums[b].contrast) ? i : b), 0);
    const s = sums[l];
    const where = `${kindLabel(m)}, layer ${l + 1}`;
    const least = `it keeps least at ${tokenLabel(r.tokens[s.least])} (token ${s.least + 1}: ` +
      `${pct(m.selection[l].kept[s.least])})`;
    if (s.asked === null) {
      return `${where}: it keeps ${pct(s.pairs)} of its state per token over the pairs ` +
        `(${halfWords(s.pairs)}); ${least}.`;
    }
    const said = `while it reads the pairs it keeps ${pct(s.pairs)} of its state per token ` +
      `(${halfWords(s.pairs)}), while it is asked ${pct(s.asked)} (${halfWords(s.asked)})`;
    const verdict = Math.abs(s.contrast) < 0.02
      ? "on this sequence it forgets at about the same rate throughout"
      : s.contrast > 0 ? "it forgets and writes most where the pairs are, and holds its state while it is asked"
        : "it forgets faster while questioned than while it reads the pairs";
    return `${where}: ${said} — ${verdict}; ${least}.`;
  });
}

/** Why a fixed-size state still runs out of room, from the shipped accuracy-by-pairs curves at the
 * longest training length: up to how many pairs each state-space model answers well, and below. */
export function roomWords(curves) {
  if (!curves) return null;
  const length = Math.max(...curves.train_lengths);
  const att = curves.models.find((m) => m.n_state === null);
  const attCells = att.cells.filter((c) => c.length === length);
  const parts = curves.models.filter((m) => m.n_state !== null).map((m) => {
    const cells = m.cells.filter((c) => c.length === length);
    const fall = cells.findIndex((c) => c.accuracy < GOOD);
    const size = `${m.state_floats_per_layer.toLocaleString("en")} numbers`;
    if (fall < 0) return `N = ${m.n_state} (${size}) still answers ${pct(cells[cells.length - 1].accuracy)} ` +
      `with ${cells[cells.length - 1].pairs} pairs`;
    const held = fall > 0 ? `answers ${pct(cells[fall - 1].accuracy)} with ${cells[fall - 1].pairs} ` +
      `pair${cells[fall - 1].pairs === 1 ? "" : "s"} but ` : "";
    const last = cells[cells.length - 1];
    return `N = ${m.n_state} (${size}) ${held}${pct(cells[fall].accuracy)} with ${cells[fall].pairs}` +
      (last !== cells[fall] ? ` and ${pct(last.accuracy)} with ${last.pairs}` : "");
  });
  // the most pairs each state-space model answers well at this length (0: not even one)
  const reachOf = (m) => Math.max(0, ...m.cells.filter((c) => c.length === length &&
    c.accuracy >= GOOD).map((c) => c.pairs));
  const ssm = curves.models.filter((m) => m.n_state !== null);
  const sameReach = ssm.length > 1 && ssm.every((m) => reachOf(m) === reachOf(ssm[0]));
  const caveat = sameReach ? ` Here the larger state answers no more pairs than the smaller ` +
    `(${ssm.map((m) => `N = ${m.n_state}: ${reachOf(m)}`).join(", ")}): on these sequences its ` +
    `training, not its size, is what stops it first.` : "";
  const attWorst = Math.min(...attCells.map((c) => c.accuracy));
  const attSaid = attWorst === 1 ? "answers every asked key (100%) at every pair count"
    : `answers at least ${pct(attWorst)} at every pair count`;
  return `However well it chooses what to write, the state stays the same size: every pair ` +
    `written takes room from the pairs before it. In the shipped runs at length ${length}, ` +
    `${parts.join("; ")} — while attention, which keeps every token, ${attSaid}.${caveat}`;
}

const nowrap = (node) => { node.style.whiteSpace = "nowrap"; return node; };

/** The strip: one row per state-space model and layer, one cell per token, the share kept. */
function strip(r) {
  const head = el("tr", {}, [el("th", {}, "token"),
    ...r.tokens.map((t, i) => el("th", { title: `token ${i + 1}` }, tokenLabel(t)))]);
  const rows = r.models.filter((m) => m.selection).flatMap((m) => m.selection.map((layer, l) =>
    el("tr", {}, [nowrap(el("th", {}, `N=${m.n_state} · layer ${l + 1}`)),
      ...layer.kept.map((k, i) => {
        const cell = el("td", { "data-testid": `recall-kept-${m.kind}-${l}-${i}`, "data-value": k,
          "data-delta": layer.delta[i], title: `${tokenLabel(r.tokens[i])}: Δ = ` +
            `${layer.delta[i].toFixed(3)} (mean over channels), keeps ${(100 * k).toFixed(1)}%` },
        (100 * k).toFixed(0));
        cell.style.background = heat(forgetting(k));
        cell.style.color = ink(forgetting(k));
        return cell;
      })])));
  return scrollBox([el("table", { cls: "matrix", "data-testid": "recall-kept" }, [
    el("caption", {}, "% of the state kept at each token"),
    head, ...rows])], "share of the state kept at each token");
}

/** The block under the answers: what selective means, the strip, and the words. */
export function selectionBlock(r, curves) {
  const room = roomWords(curves);
  return el("div", { "data-testid": "recall-selection" }, [
    el("h4", {}, "What “selective” selects"),
    el("p", {}, "Mamba's scan is selective because Δ, B and C are computed from each token: at " +
      "every token the model chooses how much to write into its state (B̄ = ΔB) and how much of " +
      "it to keep (Ā = exp(ΔA), A negative): a large Δ forgets and writes, a small Δ holds. " +
      "Below, on your sequence, the share each layer keeps, computed by qkv.nn's own S6 layer."),
    el("p", { cls: "note" }, "Each cell: the share of the state a layer keeps at that token, the " +
      "decay exp(ΔA) averaged (geometric mean) over channels and states; the darker, the more " +
      "of the state forgotten and written over there (darkest: half of it). Tokens: k3 a stored " +
      "key, v17 its value, ?3 an asked key, · a blank. Hover a cell for its Δ."),
    strip(r),
    ...selectionWords(r).map((w, i) => el("p", { "data-testid": `recall-selection-words-${i}` }, w)),
    ...(room ? [el("p", { "data-testid": "recall-room" }, room)] : []),
  ]);
}

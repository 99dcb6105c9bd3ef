// The GPT view's drawing pieces, shared by views/gpt.js and the modules of gpt/: the labelled
// heat map of one head's causal weights, the probability bars, and the small formatters the
// sentences use. Nothing here computes attention: every number drawn comes from the server.
import { el, fmt, svg } from "../core/dom.js";
import { COLORS, heat } from "../core/legend.js";

export const VISIBLE = { "\n": "⏎", " ": "␣", "\t": "⇥" };
export const show1 = (c) => VISIBLE[c] || c;
export const pct = (p) => `${fmt(100 * p, 1)}%`;
/** A fall d in probability as a change in percentage points: 0.515 → "−51.5 points". */
export const points = (d) => {
  const size = fmt(Math.abs(100 * d), 1);
  return `${Number(size) === 0 ? "" : d > 0 ? "−" : "+"}${size} points`;
};
/** "+0.04", "-0.10", and "0.00" for what rounds to zero (no sign on nothing). */
export const signed = (v, digits = 2) => {
  const s = fmt(v, digits);
  return s.startsWith("-") || Number(s) === 0 ? s : `+${s}`;
};
/** "1 head", "3 heads". */
export const count = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;
/** One head's weights as a heat map with every row and column labelled by its character, at
 * any length: a keyboard-reachable scroll region whose label bands stay pinned (sticky) while
 * the cells scroll. Masked (future) cells grey with ×, never "0". */
export function heatmap(weights, allowed, rows, cols, testid, label) {
  const n = rows.length, m = cols.length;
  const cell = Math.max(14, Math.min(22, Math.floor(360 / Math.max(n, m))));
  const band = 18; // the label bands' width
  const region = el("div", { cls: "gpt-heat", tabindex: 0, role: "region",
    "data-testid": `${testid}-region`,
    "aria-label": `${label}: ${count(n, "row")} × ${count(m, "column")}, each labelled with ` +
      "its character; scroll to see them all" });
  region.style.gridTemplateColumns = `${band}px ${m * cell}px`;
  const cornerBox = el("div", { cls: "gpt-heat-corner" });
  const colBand = svg("svg", { width: m * cell, height: band, cls: "gpt-heat-cols",
    "aria-hidden": "true" });
  const rowBand = svg("svg", { width: band, height: n * cell, cls: "gpt-heat-rows",
    "aria-hidden": "true" });
  cols.forEach((c, j) => {
    const t = svg("text", { x: j * cell + cell / 2, y: band - 5, cls: "tok-label",
      "text-anchor": "middle", "data-testid": `${testid}-col-${j}` });
    t.textContent = show1(c);
    colBand.append(t);
  });
  rows.forEach((c, i) => {
    const t = svg("text", { x: band / 2, y: i * cell + cell * 0.72, cls: "tok-label",
      "text-anchor": "middle", "data-testid": `${testid}-row-${i}` });
    t.textContent = show1(c);
    rowBand.append(t);
  });
  const map = svg("svg", { width: m * cell, height: n * cell, cls: "heatmap", role: "img",
    "data-testid": testid, "aria-label": label });
  weights.forEach((row, i) => row.forEach((w, j) => {
    const ok = allowed ? allowed[i][j] : true;
    const rect = svg("rect", { x: j * cell, y: i * cell, width: cell, height: cell,
      cls: ok ? "hcell" : "hcell masked", "data-testid": `${testid}-${i}-${j}`,
      "data-value": w, "data-allowed": ok ? "1" : "0" });
    rect.style.fill = ok ? heat(w) : COLORS.masked;
    const tip = svg("title");
    tip.textContent = `“${show1(rows[i])}” (${i}) → “${show1(cols[j])}” (${j}): ` +
      (ok ? fmt(w) : "masked: a future character");
    rect.append(tip);
    map.append(rect);
    if (!ok) {
      const mark = svg("text", { x: j * cell + cell / 2, y: i * cell + cell * 0.75,
        cls: "mask-mark", "text-anchor": "middle", "aria-hidden": "true" });
      mark.textContent = COLORS.masked_mark;
      map.append(mark);
    }
  }));
  region.append(cornerBox, colBand, rowBand, map);
  return region;
}

export function bar(p, cls) {
  const b = el("span", { cls: `gpt-bar ${cls}` });
  b.style.width = `${Math.max(1, Math.round(p * 160))}px`;
  return b;
}

/** The causal pattern of n positions: key j may be read by query i when j ≤ i. */
export const causal = (n) => Array.from({ length: n }, (_, i) =>
  Array.from({ length: n }, (_, j) => j <= i));

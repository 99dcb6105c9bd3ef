// Tables of numbers: one matrix, its rows and columns named, each cell holding its full value
// in data-value and its rounded text for people.
import { el, fmt } from "./dom.js";
import { COLORS, paint } from "./legend.js";

/**
 * A matrix as a table in a scrolling box. Cells have data-testid `${name}-${i}-${j}`.
 * opts: digits (4), heat (colour by weight), allowed (rows × cols booleans: false cells are
 * marked masked), rowSums (+ sumId, default `${name}-rowsum`; sumDigits, default 3), colSums
 * (testids `${name}-colsum-${j}`).
 */
export function matrixTable(name, matrix, rowPrefix, colPrefix, opts = {}) {
  const digits = opts.digits || 4;
  const sumId = opts.sumId || `${name}-rowsum`;
  const table = el("table", { cls: "matrix", "data-testid": `table-${name}` });
  table.append(el("tr", {}, [el("th"), ...matrix[0].map((_, j) => el("th", {}, `${colPrefix}${j}`)),
    ...(opts.rowSums ? [el("th", {}, "Σ")] : [])]));
  matrix.forEach((row, i) => {
    const tr = el("tr", {}, [el("th", {}, `${rowPrefix}${i}`)]);
    row.forEach((x, j) => {
      const masked = opts.allowed && !opts.allowed[i][j];
      const td = el("td", { "data-testid": `${name}-${i}-${j}`, "data-value": x },
        masked ? `${COLORS.masked_mark} ${fmt(x, digits)}` : fmt(x, digits));
      if (opts.heat && !masked) paint(td, x);
      if (masked) {
        td.classList.add("denied");
        td.title = "masked: this pair may not attend";
      }
      tr.append(td);
    });
    if (opts.rowSums) {
      tr.append(el("td", { cls: "sum", "data-testid": `${sumId}-${i}`,
        "data-value": opts.rowSums[i] }, fmt(opts.rowSums[i], opts.sumDigits || 3)));
    }
    table.append(tr);
  });
  if (opts.colSums) {
    table.append(el("tr", {}, [el("th", {}, "Σ"), ...opts.colSums.map((x, j) =>
      el("td", { cls: "sum", "data-testid": `${name}-colsum-${j}`, "data-value": x }, fmt(x, 3)))]));
  }
  return el("div", { cls: "scroll" }, [table]);
}

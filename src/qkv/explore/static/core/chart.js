// Line charts of measured curves (accuracy by lag or by length, time against n), in SVG: axes
// with ticks, one line and its markers per series, a legend. The SVG scales with its box
// (viewBox, width 100%), so a chart never makes a phone page wider. It draws numbers it is
// given; it computes nothing about attention.
import { el, keepLegible, svg } from "./dom.js";

/** Colour-blind-safe line colours (Okabe–Ito), in series order. */
export const PALETTE = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#7a5c00"];

function axis(spec, values, lo, hi) {
  const t = spec.log ? Math.log10 : (v) => v;
  const [a, b] = (spec.domain || [Math.min(...values), Math.max(...values)]).map(t);
  const span = b - a || 1;
  return (v) => lo + ((t(v) - a) / span) * (hi - lo);
}

/**
 * opts: testid, label (for screen readers), left (the margin for the y ticks, 58), x and y: {label, log, domain [lo, hi], ticks
 * [values], format(v) → text}, series: [{name, color, dash, lineWidth, opacity, marker,
 * points: [{x, y, title, hollow}]}] (marker: "circle" by default, "square", "triangle",
 * "diamond" or "ring" — a larger open circle that leaves a marker drawn on the same point
 * inside it visible),
 * refY: optional {value, label} (a dashed horizontal line, e.g. chance), marks: optional
 * [{x, label}] (vertical lines). Each marker has data-testid `${testid}-${series}-${i}` and its
 * numbers in data-x, data-y.
 */
export function lineChart(opts) {
  const W = opts.width || 560;
  const H = opts.height || 280;
  const m = { l: opts.left || 58, r: 14, t: 12, b: 46 };
  const xs = opts.series.flatMap((s) => s.points.map((p) => p.x));
  const ys = opts.series.flatMap((s) => s.points.map((p) => p.y));
  const fx = axis(opts.x, xs, m.l, W - m.r);
  const fy = axis(opts.y, ys, H - m.b, m.t);
  const chart = keepLegible(svg("svg", { viewBox: `0 0 ${W} ${H}`, cls: "chart", role: "img",
    "data-testid": opts.testid, "aria-label": opts.label }), W);
  const line = (x1, y1, x2, y2, cls) => chart.append(svg("line", { x1, y1, x2, y2, cls }));
  const text = (x, y, s, attrs = {}) => {
    const node = svg("text", { x, y, cls: "chart-text", ...attrs });
    node.textContent = s;
    chart.append(node);
  };
  line(m.l, H - m.b, W - m.r, H - m.b, "chart-axis");
  line(m.l, m.t, m.l, H - m.b, "chart-axis");
  for (const v of opts.x.ticks) {
    line(fx(v), H - m.b, fx(v), H - m.b + 5, "chart-axis");
    text(fx(v), H - m.b + 18, opts.x.format(v), { "text-anchor": "middle" });
  }
  for (const v of opts.y.ticks) {
    line(m.l, fy(v), W - m.r, fy(v), "chart-grid");
    text(m.l - 6, fy(v) + 4, opts.y.format(v), { "text-anchor": "end" });
  }
  text((m.l + W - m.r) / 2, H - 6, opts.x.label, { "text-anchor": "middle" });
  text(14, (m.t + H - m.b) / 2, opts.y.label, { "text-anchor": "middle",
    transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})` });
  if (opts.refY) {
    line(m.l, fy(opts.refY.value), W - m.r, fy(opts.refY.value), "chart-ref");
    text(m.l + 6, fy(opts.refY.value) - 5, opts.refY.label);
  }
  for (const mark of opts.marks || []) {
    const at = fx(mark.x);
    line(at, m.t, at, H - m.b, "chart-ref");
    const right = at > m.l + 0.7 * (W - m.l - m.r); // label on the side with room
    text(right ? at - 4 : at + 4, H - m.b - 8, mark.label, { "text-anchor": right ? "end" : "start" });
  }
  opts.series.forEach((s, k) => {
    const color = s.color || PALETTE[k % PALETTE.length];
    // a series given a marker shape or dash keeps it in the legend too: where curves coincide
    // (two models right at every lag), their patterns are what tell them apart
    if (s.points.length > 1) {
      const path = svg("polyline", { cls: "chart-line",
        points: s.points.map((p) => `${fx(p.x)},${fy(p.y)}`).join(" ") });
      path.style.stroke = color;
      styleLine(path, s);
      chart.append(path);
    }
    s.points.forEach((p, i) => {
      const attrs = { "data-testid": `${opts.testid}-${k}-${i}`, "data-x": p.x, "data-y": p.y,
        cls: "chart-dot" };
      const dot = p.hollow
        ? svg("rect", { ...attrs, x: fx(p.x) - 4, y: fy(p.y) - 4, width: 8, height: 8 })
        : marker(s.marker, fx(p.x), fy(p.y), attrs);
      dot.style.stroke = color;
      dot.style.fill = p.hollow ? "#ffffff" : s.marker === "ring" ? "none" : color;
      const tip = svg("title");
      tip.textContent = p.title;
      dot.append(tip);
      chart.append(dot);
    });
  });
  const key = el("div", { cls: "legend-bar chart-key" }, opts.series.filter((s) => !s.hideKey)
    .map((s) => {
      const k = opts.series.indexOf(s);
      const color = s.color || PALETTE[k % PALETTE.length];
      if (s.dash || s.marker) return el("span", {}, [patternSwatch(s, color), s.name]);
      const sw = el("span", { cls: "chart-swatch", "aria-hidden": "true" });
      sw.style.background = color;
      return el("span", {}, [sw, s.name]);
    }));
  return el("figure", { cls: "chart-box" }, [chart, key, ...(opts.caption
    ? [el("figcaption", {}, opts.caption)] : [])]);
}

/** A marker of shape ``kind`` centred at (cx, cy): circle (default), square, triangle, diamond,
 * ring (an open circle of radius 8, around whatever marker shares its point). */
export function marker(kind, cx, cy, attrs = {}) {
  const path = (d) => svg("path", { ...attrs, d });
  if (kind === "square") return svg("rect", { ...attrs, x: cx - 4, y: cy - 4, width: 8, height: 8 });
  if (kind === "triangle") return path(`M${cx},${cy - 5} L${cx + 5},${cy + 4} L${cx - 5},${cy + 4} Z`);
  if (kind === "diamond") return path(`M${cx},${cy - 5} L${cx + 5},${cy} L${cx},${cy + 5} L${cx - 5},${cy} Z`);
  return svg("circle", { ...attrs, cx, cy, r: kind === "ring" ? 8 : 4 });
}

/** A line's pattern from a series' options: dash, lineWidth (px), opacity. */
export function styleLine(line, s) {
  if (s.dash) line.style.strokeDasharray = s.dash;
  if (s.lineWidth) line.style.strokeWidth = String(s.lineWidth);
  if (s.opacity) line.style.opacity = String(s.opacity);
}

/** A legend swatch drawing a series' line pattern and marker (the chart's, not a colour bar). */
export function patternSwatch(s, color) {
  const box = svg("svg", { viewBox: "0 0 30 16", width: 30, height: 16, cls: "chart-pattern",
    "aria-hidden": "true" });
  const line = svg("line", { x1: 0, y1: 8, x2: 30, y2: 8, cls: "chart-line" });
  line.style.stroke = color;
  styleLine(line, s);
  box.append(line);
  if (s.marker !== undefined) {
    const dot = marker(s.marker, 15, 8, { cls: "chart-dot" });
    dot.style.stroke = color;
    dot.style.fill = s.marker === "ring" ? "none" : color;
    box.append(dot);
  }
  return box;
}

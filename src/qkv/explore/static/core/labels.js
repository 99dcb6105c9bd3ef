// Labels beside points on an SVG plane, placed so that none covers another label or a knob
// (a draggable handle): each takes the first free spot of its own list of candidates, in
// order of importance. Nothing here knows about attention.
import { svg } from "./dom.js";

const CHAR = 0.62; // a character's width in em, generous for digits and "w=0.123"

/** The box of `text` in font size `font` drawn at (x, y) with text-anchor `anchor`. */
export function textBox(x, y, text, font, anchor = "start") {
  const width = CHAR * font * text.length + 2;
  const x0 = anchor === "end" ? x - width : anchor === "middle" ? x - width / 2 : x;
  return { x0, x1: x0 + width, y0: y - 0.8 * font, y1: y + 0.25 * font };
}

const hitsBox = (a, b) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;
const hitsCircle = (b, c) => {
  const nx = Math.max(b.x0, Math.min(c.x, b.x1));
  const ny = Math.max(b.y0, Math.min(c.y, b.y1));
  return Math.hypot(nx - c.x, ny - c.y) < c.r;
};

/**
 * Append one <text> per label to `plane`, each at the first of its `spots` ([{x, y, anchor}])
 * whose box overlaps no label placed before, no circle of `knobs` ([{x, y, r}]) and stays inside
 * `bounds` ({x0, y0, x1, y1}); when every spot is taken, the first inside that covers no
 * knob (then any that covers no knob).
 * A label is {spots, text, cls, font, attrs, parent (optional: the node it goes in, e.g. its
 * knob's button)}; returns the boxes placed.
 */
export function placeLabels(plane, labels, { knobs = [], bounds = null } = {}) {
  const placed = [];
  const inside = (b) => !bounds || (b.x0 >= bounds.x0 && b.x1 <= bounds.x1 && b.y0 >= bounds.y0
    && b.y1 <= bounds.y1);
  for (const label of labels) {
    const boxes = label.spots.map((s) => textBox(s.x, s.y, label.text, label.font, s.anchor));
    const clearOfKnobs = (b) => !knobs.some((c) => hitsCircle(b, c));
    let at = boxes.findIndex((b) => inside(b) && clearOfKnobs(b) && !placed.some((p) => hitsBox(b, p)));
    if (at < 0) at = boxes.findIndex((b) => inside(b) && clearOfKnobs(b));
    if (at < 0) at = boxes.findIndex((b) => clearOfKnobs(b));
    if (at < 0) at = 0;
    const spot = label.spots[at];
    placed.push(boxes[at]);
    const node = svg("text", { x: spot.x, y: spot.y, "text-anchor": spot.anchor || "start",
      cls: label.cls, ...(label.attrs || {}) });
    node.textContent = label.text;
    (label.parent || plane).append(node);
  }
  return placed;
}

/** Spots around a point (x, y) at distance `gap`: right, upper right, up, upper left, left,
 * lower left, down, lower right, then the same twice as far — for a label of font size
 * `font`, with the anchor that keeps the text on the point's far side. */
export function spotsAround(x, y, gap, font) {
  const spots = [];
  for (const d of [gap, 2 * gap, 3 * gap]) {
    for (let k = 0; k < 8; k += 1) {
      const a = (-Math.PI * k) / 4;
      const cx = Math.cos(a);
      const cy = Math.sin(a);
      const anchor = cx > 0.3 ? "start" : cx < -0.3 ? "end" : "middle";
      spots.push({ x: x + cx * d, y: y + cy * d + 0.35 * font, anchor });
    }
  }
  return spots;
}

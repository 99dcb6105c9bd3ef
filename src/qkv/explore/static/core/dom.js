// DOM helpers: build elements and SVG nodes, find them, format numbers for people, and speak
// to screen readers. Nothing here knows about attention.

const SVGNS = "http://www.w3.org/2000/svg";

/** The first element matching sel inside root (the whole page by default). */
export const $ = (sel, root = document) => root.querySelector(sel);
/** Every element matching sel inside root, as an array. */
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

/** Query helpers bound to one root (a view's section), so a view only touches its own nodes. */
export function scoped(root) {
  return [(sel) => root.querySelector(sel), (sel) => Array.from(root.querySelectorAll(sel))];
}

/** An HTML element: attrs (text → textContent, cls → class; null/false skipped), children
 * (nodes or strings). */
export function el(tag, attrs = {}, children = []) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  for (const child of [].concat(children)) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** An SVG element with attrs as for el(). */
export function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVGNS, tag);
  setAttrs(node, attrs);
  return node;
}

function setAttrs(node, attrs) {
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = value;
    else if (key === "cls") node.setAttribute("class", value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
}

/** A number rounded for display only (the full value stays in data-value). null is −∞ (the
 * JSON form of a fully masked row's lse). */
export function fmt(x, digits = 4) {
  if (x === null || x === undefined) return "−∞";
  const shown = Number(x).toFixed(digits);
  return /^-0\.?0*$/.test(shown) ? shown.slice(1) : shown;
}

/** "0.5, -1" or "0.5 -1" → [0.5, -1]; null unless every part is a finite number. */
export function parseVector(text) {
  const parts = text.split(/[\s,]+/).filter((s) => s !== "");
  const nums = parts.map(Number);
  return parts.length && nums.every(Number.isFinite) ? nums : null;
}

/** Say something to screen readers (the page's aria-live region). */
export function announce(text) {
  const box = $("#announce");
  if (box) box.textContent = text;
}

/** An SVG point of a pointer event, in the coordinates of the SVG element plane. */
export function svgPoint(plane, event) {
  const pt = plane.createSVGPoint();
  pt.x = event.clientX;
  pt.y = event.clientY;
  return pt.matrixTransform(plane.getScreenCTM().inverse());
}

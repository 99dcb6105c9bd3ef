// DOM helpers: build elements and SVG nodes, find them, format numbers for people, and speak
// to screen readers. Nothing here knows about attention.

const SVGNS = "http://www.w3.org/2000/svg";

// Where $ and $$ search by default: the whole page, or (setRoot) a notebook widget's element,
// so the page-wide parts (#error, #announce) are found in that widget only.
let top = document;

/** Make $ and $$ search inside node by default (the notebook widgets' hook). */
export function setRoot(node) {
  top = node;
}

/** The first element matching sel inside root (the page, or setRoot's node, by default). */
export const $ = (sel, root = top) => root.querySelector(sel);
/** Every element matching sel inside root, as an array. */
export const $$ = (sel, root = top) => Array.from(root.querySelectorAll(sel));

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

/** A box that scrolls sideways when its content is wider than the screen (a phone): a named
 * region the keyboard can reach, so its hidden part can be scrolled to (axe-core's
 * scrollable-region-focusable). */
export function scrollBox(children, label) {
  return el("div", { cls: "scroll", tabindex: 0, role: "region", "aria-label": label }, children);
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

/** "1 step", "3 steps", "1 query", "2 queries": a count with its noun in agreement. */
export function plural(n, one, many = `${one}s`) {
  return `${n.toLocaleString("en-US")} ${n === 1 ? one : many}`;
}

/** A number typed into `input` (a text or number field), read as a person would: returns
 * { value } or { problem }, a sentence that names the field by `label` and says what to type —
 * "abc" is not "should be ≥ 1". A number field holding letters reports an empty value and
 * validity.badInput; both are answered in words. */
export function readNumber(input, label, { min = -Infinity, max = Infinity, whole = false } = {}) {
  const text = input.value.trim();
  const range = Number.isFinite(min) && Number.isFinite(max) ? ` from ${min} to ${max}`
    : Number.isFinite(min) ? ` of at least ${min}` : Number.isFinite(max) ? ` of at most ${max}` : "";
  const want = `type ${whole ? "a whole number" : "a number"}${range}`;
  if ((input.validity && input.validity.badInput) || text === "") {
    return { problem: `${label}: ${want}${text ? ` (“${text}” is not a number)` : ""}.` };
  }
  const x = Number(text);
  if (!Number.isFinite(x)) return { problem: `${label}: ${want} (“${text}” is not a number).` };
  if (whole && !Number.isInteger(x)) return { problem: `${label}: ${want} (${text} is not whole).` };
  if (x < min || x > max) return { problem: `${label}: ${want} (${text} is out of range).` };
  return { value: x };
}

/** Keep an SVG's text legible when its viewBox is drawn smaller than `width` user units (a
 * chart on a phone): sets --u = max(1, user units per CSS px) on it, which the CSS multiplies
 * into its text's font-size, now and whenever it is resized. */
export function keepLegible(node, width) {
  const update = () => {
    const shown = node.getBoundingClientRect().width;
    if (shown > 0) node.style.setProperty("--u", String(Math.max(1, width / shown)));
  };
  new ResizeObserver(update).observe(node);
  return node;
}

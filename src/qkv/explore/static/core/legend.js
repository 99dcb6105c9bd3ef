// The one weight colour scale, served by the server from qkv.render.colors (/api/colors):
// linear from white at 0 to dark blue at 1, as `qkv look` and `qkv.show` draw it. The copy
// below is the same scale, used only until /api/colors answers.
import { el } from "./dom.js";

export let COLORS = {
  low_rgb: [255, 255, 255], high_rgb: [8, 48, 107], ink_threshold: 0.655,
  ink_light: "#ffffff", ink_dark: "#000000", masked: "#d9d9d9", masked_mark: "×",
};

/** Fetch the scale from the server (once, at start-up); keep the built-in copy on failure. */
export async function loadColors() {
  try {
    const answer = await fetch("/api/colors");
    if (answer.ok) COLORS = await answer.json();
  } catch { /* the server is gone: every view will say so */ }
}

/** [r, g, b] of weight w (clamped to [0, 1]). */
export function heatRGB(w) {
  const t = Math.max(0, Math.min(1, Number(w)));
  return COLORS.low_rgb.map((lo, c) => Math.round(lo + (COLORS.high_rgb[c] - lo) * t));
}
/** [r, g, b] of a masked (not allowed) cell. */
export const maskedRGB = () => COLORS.masked.match(/\w\w/g).map((h) => parseInt(h, 16));
/** CSS colour of weight w. */
export const heat = (w) => `rgb(${heatRGB(w).join(", ")})`;
/** Readable text colour on heat(w). */
export const ink = (w) => (w > COLORS.ink_threshold ? COLORS.ink_light : COLORS.ink_dark);

/** Colour a cell by its weight (background and readable text). */
export function paint(node, w) {
  node.style.background = heat(w);
  node.style.color = ink(w);
}

/** A legend for the weight scale: a bar from 0 to 1, and the masked mark. */
export function legend(testid) {
  const bar = el("div", { cls: "legend-ramp", "aria-hidden": "true" });
  bar.style.background = `linear-gradient(to right, ${heat(0)}, ${heat(1)})`;
  return el("div", { cls: "legend-bar", "data-testid": testid }, [
    el("span", {}, "weight 0"), bar, el("span", {}, "1"),
    el("span", { cls: "legend-masked" }, [el("span", { cls: "sw-masked", "aria-hidden": "true" },
      COLORS.masked_mark), " masked (not allowed)"]),
  ]);
}

// View 6 · Cost: n × n scores, the work and memory they take, and the tiles a mask lets qkv's
// kernel skip (POST /api/cost: sizes, and qkv.engine.block_map's classification).
import { Channel } from "../core/api.js";
import { announce, el } from "../core/dom.js";
import { COLORS, heat, heatRGB, maskedRGB } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";

export const name = "cost";
export const READS = {
  "/api/cost": ["n", "d", "entries", "flops_dense", "flops_qkv", "naive_bytes", "qkv_bytes",
    "tile", "workers", "tiles.empty", "tiles.partial", "tiles.full", "tiles.total", "grid",
    "mask_description"],
};

let root;
const $ = (sel) => root.querySelector(sel);

const channel = new Channel(name, "/api/cost", render);

/** Bytes for people: 1.5 MB, 2 GB. */
function bytes(b) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let u = 0;
  while (b >= 1024 && u < units.length - 1) { b /= 1024; u += 1; }
  return `${b.toFixed(b < 10 && u ? 1 : 0)} ${units[u]}`;
}
const big = (x) => x >= 1e9 ? `${(x / 1e9).toFixed(2)}·10⁹` : x >= 1e6 ? `${(x / 1e6).toFixed(2)}·10⁶` : x.toLocaleString("en");

export function show() {
  $("#cost-n").value = Math.round(Math.log2(state.cost.n));
  $("#cost-n-value").textContent = `n = ${state.cost.n.toLocaleString("en")}`;
  $("#cost-mask").value = state.cost.mask;
  channel.send({ n: state.cost.n, mask: state.cost.mask });
}

function render(data) {
  const t = data.tiles;
  const stat = (testid, label, value, shown) => el("tr", {}, [el("th", {}, label),
    el("td", { "data-testid": testid, "data-value": value }, shown)]);
  const table = el("table", { cls: "matrix cost" }, [
    stat("cost-entries", "n × n scores", data.entries, `${big(data.entries)}`),
    stat("cost-flops-dense", `work, every pair (4·n²·d flops, d = ${data.d})`, data.flops_dense, big(data.flops_dense)),
    stat("cost-flops-qkv", "work qkv does (skipped tiles cost nothing)", data.flops_qkv, big(data.flops_qkv)),
    stat("cost-naive", "naive memory: scores + weights, n × n float32 each", data.naive_bytes, bytes(data.naive_bytes)),
    stat("cost-qkv", `qkv's memory: one ${data.tile[0]} × ${data.tile[1]} tile per worker (${data.workers}) + output`, data.qkv_bytes, bytes(data.qkv_bytes)),
    stat("cost-skipped", "tiles skipped (empty) / partial / full", t.empty,
      `${t.empty.toLocaleString("en")} / ${t.partial.toLocaleString("en")} / ${t.full.toLocaleString("en")} of ${t.total.toLocaleString("en")}`),
  ]);
  const rows = data.grid.length;
  const cols = data.grid[0].length;
  const canvas = el("canvas", { cls: "tile-grid", "data-testid": "cost-grid", role: "img",
    "aria-label": `${rows} × ${cols} tiles of ${data.tile[0]} queries × ${data.tile[1]} keys: ${t.empty} skipped, ${t.partial} partial, ${t.full} full` });
  canvas.dataset.grid = data.grid.join("/");
  canvas.width = cols;
  canvas.height = rows;
  const ctx = canvas.getContext("2d");
  const image = ctx.createImageData(cols, rows);
  const palette = { 0: maskedRGB(), 1: heatRGB(0.45), 2: heatRGB(1) };
  data.grid.forEach((row, i) => [...row].forEach((c, j) => {
    const o = 4 * (i * cols + j);
    const rgb = palette[c];
    image.data.set([rgb[0], rgb[1], rgb[2], 255], o);
  }));
  ctx.putImageData(image, 0, 0);
  const side = Math.min(360, Math.max(120, cols * 12));
  canvas.style.width = `${side}px`;
  canvas.style.height = `${(side * rows) / cols}px`;
  const key = el("div", { cls: "legend-bar" }, [
    el("span", { cls: "sw-tile empty", "aria-hidden": "true" }), "skipped (no allowed pair)",
    el("span", { cls: "sw-tile partial", "aria-hidden": "true" }), "partial (mask applied per pair)",
    el("span", { cls: "sw-tile full", "aria-hidden": "true" }), "full (no mask work)"]);
  key.querySelector(".empty").style.background = COLORS.masked;
  key.querySelector(".partial").style.background = heat(0.45);
  key.querySelector(".full").style.background = heat(1);
  $("#cost-result").replaceChildren(
    el("div", { cls: "scroll" }, [table]),
    el("h4", {}, `the kernel's tiles for this mask (${data.mask_description}), from qkv.engine.block_map`),
    canvas, key);
  announce(`n ${data.n}: ${big(data.entries)} scores; naive memory ${bytes(data.naive_bytes)}, qkv ${bytes(data.qkv_bytes)}; ${t.empty} of ${t.total} tiles skipped`);
}

export function mount(section) {
  root = section;
  $("#cost-n").addEventListener("input", () => {
    state.cost.n = 2 ** Number($("#cost-n").value);
    writeURL();
    show();
  });
  $("#cost-mask").addEventListener("change", () => {
    state.cost.mask = $("#cost-mask").value;
    writeURL();
    show();
  });
}

export function sync() {}

// View 1 · X → Q, K, V: n tokens of d_model = 2 numbers drawn as a shape, mapped three ways by
// W_Q, W_K, W_V (dragged basis arrows or typed numbers), and the attention of the projected
// tokens. Q, K, V and the weights come from the server (POST /api/projections); the local
// product only keeps a drag smooth while the answer is on its way.
import { ApiError, Channel } from "../core/api.js";
import { announce, el, fmt, svg, svgPoint } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { legend } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";
import { matrixTable } from "../core/table.js";

export const name = "projections";
export const READS = {
  "/api/projections": ["q", "k", "v", "trace.weights", "trace.output", "shapes.weights",
    "shapes.output"],
};

let root;
const $ = (sel) => root.querySelector(sel);

const SHAPES = {
  circle: Array.from({ length: 8 }, (_, i) => [
    Number(Math.cos((2 * Math.PI * i) / 8).toFixed(4)),
    Number(Math.sin((2 * Math.PI * i) / 8).toFixed(4))]),
  letter: [[-0.5, -1], [-0.5, -0.3], [-0.5, 0.4], [-0.5, 1], [0.2, 1], [0.9, 1], [0.2, 0.4]],
};
const SHAPE_PATHS = { circle: [0, 1, 2, 3, 4, 5, 6, 7, 0], letter: [0, 1, 2, 3, 4, 5, null, 2, 6] };
const deg = Math.PI / 180;
const PRESETS = {
  identity: [[1, 0], [0, 1]],
  rotation: [[Math.cos(45 * deg), Math.sin(45 * deg)], [-Math.sin(45 * deg), Math.cos(45 * deg)]]
    .map((r) => r.map((x) => Number(x.toFixed(4)))),
  stretch: [[2, 0], [0, 0.5]],
  shear: [[1, 0], [1, 1]],
  projection: [[0.5, 0.5], [0.5, 0.5]],
};
const PLANE = { size: 220, range: 2.5 };
const MATS = [["w_q", "W_Q", "Q", "query"], ["w_k", "W_K", "K", "key"], ["w_v", "W_V", "V", "value"]];
let learned = null; // the "learned" preset, served by /api/projections/learned
let answer = null; // the last answer, with the request it answers
const channel = new Channel(name, "/api/projections", (data, body) => {
  answer = { ...data, request: body };
  renderResult(data);
  renderPlanes();
});

/** Fetch the "learned" preset once, before the page starts. */
export async function prepare() {
  try {
    const reply = await fetch("/api/projections/learned");
    if (reply.ok) learned = await reply.json();
  } catch { /* the server is gone: every view will say so */ }
}

function request() {
  return { x: SHAPES[state.proj.shape], w_q: state.proj.w_q, w_k: state.proj.w_k,
    w_v: state.proj.w_v };
}

export function show() {
  renderEditors();
  renderPlanes();
  channel.send(request());
}

function toPx(x, y) {
  const u = PLANE.size / (2 * PLANE.range);
  return [PLANE.size / 2 + x * u, PLANE.size / 2 - y * u];
}

function shapePlane(title, points, kind, basis) {
  const plane = svg("svg", { viewBox: `0 0 ${PLANE.size} ${PLANE.size}`,
    width: PLANE.size, height: PLANE.size, cls: "proj-plane",
    "data-testid": `proj-plane-${title}`, role: "group",
    "aria-label": basis ? `${title} = X ${basis.label}: the shape mapped by ${basis.label}; its two basis arrows are buttons, arrow keys move them`
      : `${title}: the input shape` });
  const [cx, cy] = toPx(0, 0);
  plane.append(svg("line", { x1: 0, y1: cy, x2: PLANE.size, y2: cy, cls: "axis" }));
  plane.append(svg("line", { x1: cx, y1: 0, x2: cx, y2: PLANE.size, cls: "axis" }));
  const order = SHAPE_PATHS[state.proj.shape];
  let d = "";
  let pen = false;
  for (const i of order) {
    if (i === null) { pen = false; continue; }
    const [x, y] = toPx(...points[i]);
    d += `${pen ? "L" : "M"} ${x.toFixed(1)} ${y.toFixed(1)} `;
    pen = true;
  }
  plane.append(svg("path", { d, cls: `shape ${kind}` }));
  points.forEach((p, i) => {
    const [x, y] = toPx(...p);
    plane.append(svg("circle", { cx: x, cy: y, r: 3, cls: `pt ${kind}` }));
    const t = svg("text", { x: x + 4, y: y - 4, cls: "pt-label" });
    t.textContent = String(i);
    plane.append(t);
  });
  if (basis) {
    basis.m.forEach((row, r) => {
      const [x, y] = toPx(row[0], row[1]);
      plane.append(svg("line", { x1: cx, y1: cy, x2: x, y2: y, cls: `basis b${r}` }));
      const g = svg("g", { cls: "basis-handle", tabindex: 0, role: "button",
        "data-mat": basis.key, "data-row": r,
        "data-testid": `basis-${basis.key}-${r}`,
        "aria-label": `${basis.label} row ${r} (the image of e${r}) at (${row.map((z) => fmt(z, 2)).join(", ")}): drag or use the arrow keys` });
      g.append(svg("circle", { cx: x, cy: y, r: 8, cls: `handle-knob b${r}` }));
      const t = svg("text", { x: x + 9, y: y + 4, cls: "knob-name" });
      t.textContent = `e${r}`;
      g.append(t);
      plane.append(g);
    });
  }
  return el("figure", { cls: "proj-fig" }, [plane, el("div", { cls: "plane-title" }, title)]);
}

function renderPlanes() {
  const x = SHAPES[state.proj.shape];
  const mul = (m) => x.map(([a, b]) => [a * m[0][0] + b * m[1][0], a * m[0][1] + b * m[1][1]]);
  // drawn from the server's Q, K, V when they belong to these matrices (they always do once
  // the answer is in); the local product only keeps a drag smooth while the answer is on its way
  const fresh = answer && JSON.stringify(answer.request) === JSON.stringify(request());
  const focused = document.activeElement && document.activeElement.dataset
    ? document.activeElement.dataset.testid : null;
  const figs = [shapePlane("X", x, "x", null)];
  for (const [key, label, title, kind] of MATS) {
    const pts = fresh ? answer[title.toLowerCase()] : mul(state.proj[key]);
    figs.push(shapePlane(title, pts, kind, { key, label, m: state.proj[key] }));
  }
  $("#proj-planes-box").replaceChildren(...figs);
  if (focused) {
    const again = $(`[data-testid="${focused}"]`);
    if (again && again.closest("#proj-planes-box")) again.focus();
  }
}

function renderEditors() {
  const box = $("#proj-mats");
  if (!$("#proj-planes-box")) {
    box.replaceChildren(el("div", { id: "proj-planes-box", cls: "proj-planes" }),
      el("div", { id: "proj-editors", cls: "proj-editors" }));
  }
  const editors = $("#proj-editors");
  const focused = document.activeElement && document.activeElement.closest
    && document.activeElement.closest("#proj-editors") ? document.activeElement.dataset.testid : null;
  editors.replaceChildren(...MATS.map(([key, label]) => {
    const m = state.proj[key];
    const cells = [];
    m.forEach((row, r) => row.forEach((x, c) => {
      const input = el("input", { value: String(x), size: 5, "data-testid": `${key}-${r}-${c}`,
        "aria-label": `${label} row ${r} column ${c}` });
      input.addEventListener("change", () => {
        const v = Number(input.value);
        if (!Number.isFinite(v) || input.value.trim() === "") {
          showError(name, new ApiError(0, `${label}[${r}][${c}]: “${input.value}” is not a number`));
          return;
        }
        state.proj[key][r][c] = v;
        writeURL();
        show();
      });
      cells.push(input);
    }));
    const select = el("select", { "data-testid": `preset-${key}`, "aria-label": `${label} preset` },
      [el("option", { value: "" }, "preset…"),
        ...Object.keys(PRESETS).map((p) => el("option", { value: p }, p)),
        el("option", { value: "learned" }, "learned (trained)")]);
    select.addEventListener("change", () => {
      const p = select.value;
      if (p === "learned") {
        if (!learned) return;
        state.proj.w_q = structuredClone(learned.w_q);
        state.proj.w_k = structuredClone(learned.w_k);
        state.proj.w_v = structuredClone(learned.w_v);
        state.proj.shape = learned.shape || state.proj.shape;
        $("#proj-shape").value = state.proj.shape;
        announce(`learned matrices loaded: ${learned.source}`);
      } else if (p) {
        state.proj[key] = structuredClone(PRESETS[p]);
      }
      writeURL();
      show();
    });
    return el("div", { cls: "mat-editor" }, [
      el("div", { cls: "mat-title" }, `${label} (2 × 2)`),
      el("div", { cls: "mat-grid" }, cells), select]);
  }));
  if (focused) {
    const again = $(`[data-testid="${focused}"]`);
    if (again) again.focus();
  }
  $("#proj-shapes").textContent = `X is ${SHAPES[state.proj.shape].length} × 2 (n × d_model) → ` +
    `Q, K: n × d_k, V: n × d_v, with d_k = d_v = d_model = 2`;
}

function renderResult(data) {
  const t = data.trace;
  $("#proj-result").replaceChildren(el("div", { cls: "steps" }, [
    el("div", { cls: "step" }, [el("h4", {}, `weights = softmax(Q Kᵀ/√2): ${data.shapes.weights}`),
      matrixTable("proj-weight", t.weights, "q", "k", { heat: true, digits: 3 })]),
    el("div", { cls: "step" }, [el("h4", {}, `output = weights V: ${data.shapes.output}`),
      matrixTable("proj-output", t.output, "q", "d", { digits: 3 })]),
  ]), legend("proj-legend"));
  announce(`projections updated: token 0 attends most to token ${t.weights[0].indexOf(Math.max(...t.weights[0]))}`);
}

export function mount(section) {
  root = section;
  $("#proj-shape").addEventListener("change", () => {
    state.proj.shape = $("#proj-shape").value;
    writeURL();
    show();
  });
  const box = $("#proj-mats");
  let drag = null;
  const pointIn = (event, planeEl) => {
    const p = svgPoint(planeEl, event);
    const u = PLANE.size / (2 * PLANE.range);
    const snap = (z) => Math.round(Math.max(-PLANE.range, Math.min(PLANE.range, z)) * 20) / 20;
    return [snap((p.x - PLANE.size / 2) / u), snap((PLANE.size / 2 - p.y) / u)];
  };
  box.addEventListener("pointerdown", (event) => {
    const handle = event.target.closest(".basis-handle");
    if (!handle) return;
    drag = { key: handle.dataset.mat, row: Number(handle.dataset.row),
      plane: handle.closest("svg").dataset.testid };
    box.setPointerCapture(event.pointerId);
    event.preventDefault();
  });
  box.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const planeEl = $(`[data-testid="${drag.plane}"]`);
    state.proj[drag.key][drag.row] = pointIn(event, planeEl);
    show();
  });
  const stop = () => {
    if (drag) writeURL();
    drag = null;
  };
  box.addEventListener("pointerup", stop);
  box.addEventListener("pointercancel", stop);
  box.addEventListener("keydown", (event) => {
    const handle = event.target.closest(".basis-handle");
    const step = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, 1], ArrowDown: [0, -1] }[event.key];
    if (!handle || !step) return;
    event.preventDefault();
    const by = event.shiftKey ? 0.25 : 0.05;
    const row = state.proj[handle.dataset.mat][Number(handle.dataset.row)];
    row[0] = Math.round((row[0] + step[0] * by) * 100) / 100;
    row[1] = Math.round((row[1] + step[1] * by) * 100) / 100;
    writeURL();
    show();
  });
}

export function sync() {
  $("#proj-shape").value = state.proj.shape;
}

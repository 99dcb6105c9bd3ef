// View 4 · Masks: which pairs may attend at all (True = may attend). Presets combine with &,
// clicked cells flip; the grid's weights, the mask in sentences and as qkv code all come from
// the server (POST /api/mask: qkv.masks and qkv.explain).
import { Channel } from "../core/api.js";
import { announce, el, fmt } from "../core/dom.js";
import { COLORS, legend, paint } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";

export const name = "masks";
export const READS = {
  "/api/mask": ["tokens", "trace.mask", "trace.weights", "trace.allowed", "row_sums",
    "fully_masked_rows", "description"],
};

let root;
const $ = (sel) => root.querySelector(sel);
const $$ = (sel, within = root) => Array.from(within.querySelectorAll(sel));

let trace = null; // the last answer's trace
let refocusCell = null; // the cell the keyboard flipped: focused again once redrawn
const channel = new Channel(name, "/api/mask", (data) => {
  trace = data.trace;
  render(data);
});

const tokenList = () => state.tokens.split(/\s+/).filter((t) => t !== "");

/** Default document ids: a new document starts after each "." token. */
function documentIds(tokens) {
  let doc = 0;
  return tokens.map((t) => {
    const id = doc;
    if (t === ".") doc += 1;
    return id;
  });
}

function readPresets() {
  const tokens = tokenList();
  const presets = [];
  for (const box of $$("[data-preset]")) {
    if (!box.checked) continue;
    const label = box.closest("label");
    const preset = { kind: box.dataset.preset };
    for (const input of $$("[data-param]", label)) {
      const param = input.dataset.param;
      const text = input.value.trim();
      if (param === "ids") {
        preset.ids = text === "" ? documentIds(tokens) : text.split(/[\s,]+/).map(Number);
      } else if (text !== "") {
        preset[param] = Number(text);
      }
    }
    presets.push(preset);
  }
  return presets;
}

function writePresetControls() {
  for (const box of $$("[data-preset]")) {
    const preset = state.presets.find((p) => p.kind === box.dataset.preset);
    box.checked = Boolean(preset);
    if (!preset) continue;
    for (const input of $$("[data-param]", box.closest("label"))) {
      const value = preset[input.dataset.param];
      if (value === undefined || value === null) continue;
      const derived = input.dataset.param === "ids"
        && JSON.stringify(value) === JSON.stringify(documentIds(tokenList()));
      input.value = derived ? "" : Array.isArray(value) ? value.join(" ") : value;
    }
  }
}

export function show() {
  const n = tokenList().length;
  state.overrides = state.overrides.filter((c) => c.i < n && c.j < n);
  state.presets = readPresets();
  writeURL();
  channel.send({ tokens: tokenList(), mask: { presets: state.presets,
    overrides: state.overrides }, seed: state.seed, uniform: state.uniform });
}

function render(data) {
  const t = data.trace;
  $("#mask-repr").textContent = t.mask === null ? "None" : t.mask;
  $("#mask-description").textContent = data.description;
  const table = el("table", { cls: "matrix mask" });
  table.append(el("tr", {}, [el("th", {}, "query ↓ key →"),
    ...data.tokens.map((tok) => el("th", { cls: "tok" }, tok)), el("th", {}, "Σ")]));
  data.tokens.forEach((tok, i) => {
    const empty = data.fully_masked_rows.includes(i);
    const tr = el("tr", { cls: empty ? "empty-row" : "" }, [el("th", { cls: "tok" }, tok)]);
    t.weights[i].forEach((w, j) => {
      const allowed = t.allowed[i][j];
      const said = `${tok} → ${data.tokens[j]}: ${allowed ? `allowed, weight ${fmt(w)}` : "masked"}`;
      const td = el("td", {
        cls: allowed ? "cell" : "cell denied", "data-testid": `mask-cell-${i}-${j}`,
        "data-value": w, "data-allowed": allowed ? "1" : "0", tabindex: 0, role: "button",
        "aria-label": `${said}. Press Enter to flip.`, title: `${said}. Click to flip.`,
      }, allowed ? fmt(w, 2) : COLORS.masked_mark);
      if (allowed) paint(td, w);
      td.addEventListener("click", () => toggleCell(i, j));
      td.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          refocusCell = `mask-cell-${i}-${j}`;
          toggleCell(i, j);
        }
      });
      tr.append(td);
    });
    tr.append(el("td", { cls: "sum", "data-testid": `mask-rowsum-${i}`,
      "data-value": data.row_sums[i] }, empty ? "0 (no key)" : fmt(data.row_sums[i], 2)));
    table.append(tr);
  });
  const notes = data.fully_masked_rows.length
    ? `rows ${data.fully_masked_rows.join(", ")} have no allowed key: weights 0 and output 0, not NaN.`
    : "every row has at least one allowed key and sums to 1.";
  $("#mask-grid").replaceChildren(el("div", { cls: "scroll" }, [table]), legend("mask-legend"),
    el("p", { cls: "note", "data-testid": "mask-note" }, notes));
  if (refocusCell) {
    const cell = $(`[data-testid="${refocusCell}"]`);
    if (cell) cell.focus();
    refocusCell = null;
  }
  announce(`${data.description} ${notes}`);
}

function toggleCell(i, j) {
  if (!trace) return;
  const allowed = !trace.allowed[i][j];
  state.overrides = state.overrides.filter((c) => c.i !== i || c.j !== j);
  state.overrides.push({ i, j, allowed });
  show();
}

export function mount(section) {
  root = section;
  $("#mask-tokens").addEventListener("input", () => {
    state.tokens = $("#mask-tokens").value;
    show();
  });
  $("#mask-seed").addEventListener("input", () => {
    const seed = Number($("#mask-seed").value);
    if (Number.isInteger(seed) && seed >= 0) {
      state.seed = seed;
      show();
    }
  });
  $("#mask-uniform").addEventListener("change", () => {
    state.uniform = $("#mask-uniform").checked;
    show();
  });
  $("#presets").addEventListener("input", show);
  $("#clear-clicks").addEventListener("click", () => {
    state.overrides = [];
    show();
  });
}

export function sync() {
  $("#mask-tokens").value = state.tokens;
  $("#mask-seed").value = state.seed;
  $("#mask-uniform").checked = state.uniform;
  writePresetControls();
}

// View 4 · Masks: which pairs may attend at all (True = may attend). Presets combine with &,
// clicked cells flip; the grid's weights, the mask in sentences and as qkv code all come from
// the server (POST /api/mask: qkv.masks and qkv.explain).
import { ApiError, Channel } from "../core/api.js";
import { announce, el, fmt, plural, readNumber, scrollBox } from "../core/dom.js";
import { showError } from "../core/errors.js";
import { COLORS, legend, paint } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";

export const name = "masks";
export const READS = {
  "/api/mask": ["tokens", "trace.mask", "trace.weights", "trace.allowed", "row_sums",
    "fully_masked_rows", "description"],
};

// the controls by the request fields they fill, so a server's complaint names the control
export const LABELS = {
  "mask.presets[i].window.before": "window · before",
  "mask.presets[i].window.after": "window · after",
  "mask.presets[i].prefix.n": "prefix · n",
  "mask.presets[i].padding.key_length": "padding · keys",
  "mask.presets[i].padding.query_length": "padding · queries",
  "mask.presets[i].documents.ids": "documents · ids",
  "mask.presets[i]": "presets",
  "mask.overrides": "clicked cells",
  "mask": "presets",
  "tokens": "tokens",
  "seed": "seed",
};
// each preset's numbers: the label the page shows and what they may be (the server's limits)
const PARAMS = {
  before: ["window · before", { min: 0, whole: true }],
  after: ["window · after", { min: 0, whole: true }],
  n: ["prefix · n", { min: 0, whole: true }],
  key_length: ["padding · keys", { min: 0, whole: true }],
  query_length: ["padding · queries", { min: 0, whole: true }],
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

/** The checked presets with their numbers, or { problem } in the learner's words naming the
 * control (a preset's number left empty keeps its default; "abc" or −1 is a problem). */
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
        if (text === "") {
          preset.ids = documentIds(tokens);
          continue;
        }
        const ids = text.split(/[\s,]+/).filter((t) => t !== "").map(Number);
        if (!ids.every((x) => Number.isInteger(x) && x >= 0)) {
          return { problem: "documents · ids: type whole numbers of at least 0, one per token " +
            "(e.g. 0 0 0 1 1), or leave it empty for a new document after each “.”." };
        }
        if (ids.length !== tokens.length) {
          return { problem: `documents · ids: give one id per token — there are ` +
            `${plural(tokens.length, "token")} and ${plural(ids.length, "id")}.` };
        }
        preset.ids = ids;
      } else if (text !== "" || (input.validity && input.validity.badInput)) {
        const [said, limits] = PARAMS[param];
        const read = readNumber(input, said, limits);
        if (read.problem) return { problem: read.problem };
        preset[param] = read.value;
      }
    }
    presets.push(preset);
  }
  return { presets };
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

const SEED_PROBLEM = "seed: type a whole number of at least 0.";

export function show() {
  if ($("#mask-seed").classList.contains("bad")) { // keeps its error until it is fixed
    showError(name, new ApiError(0, SEED_PROBLEM));
    return;
  }
  const n = tokenList().length;
  if (n === 0) {
    showError(name, new ApiError(0, "tokens: type at least one token (words separated by spaces)."));
    return;
  }
  state.overrides = state.overrides.filter((c) => c.i < n && c.j < n);
  const read = readPresets();
  if (read.problem) {
    showError(name, new ApiError(0, read.problem));
    return;
  }
  state.presets = read.presets;
  writeURL();
  channel.send({ tokens: tokenList(), mask: { presets: state.presets,
    overrides: state.overrides }, seed: state.seed, uniform: state.uniform });
}

function render(data) {
  const t = data.trace;
  $("#mask-repr").textContent = t.mask === null ? "None" : t.mask;
  $("#mask-description").textContent = data.description;
  const table = el("table", { cls: "matrix mask" });
  const n = data.tokens.length;
  table.append(el("caption", { "data-testid": "shape-mask" }, `weights: ${n} × ${n} (n_q × n_k)`));
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
  const empty = data.fully_masked_rows;
  const notes = empty.length
    ? `${empty.length === 1 ? `Row ${empty[0]} has` : `Rows ${empty.join(", ")} have`} no allowed ` +
      "key: weights 0 and output 0, not NaN."
    : "Every row has at least one allowed key and sums to 1.";
  $("#mask-grid").replaceChildren(scrollBox([table], "the mask grid"), legend("mask-legend"),
    el("p", { cls: "note", "data-testid": "mask-note" }, notes));
  if (refocusCell) {
    const cell = $(`[data-testid="${refocusCell}"]`);
    if (cell) cell.focus();
    refocusCell = null;
  }
  renderTask(data);
  announce(`${data.description} ${notes}`);
}

const TASK_TOKEN = 3; // the task: token 3 sees only itself

/** "Make token 3 see only itself", from the answer's allowed pairs. */
function renderTask(data) {
  const box = $('[data-testid="task-self"]');
  const i = TASK_TOKEN;
  box.classList.remove("done");
  if (data.tokens.length <= i) {
    box.textContent = `There is no token ${i} yet: type at least ${i + 1} tokens.`;
    return;
  }
  const name = (j) => `${j} “${data.tokens[j]}”`;
  const allowed = data.trace.allowed[i].map((ok, j) => (ok ? j : -1)).filter((j) => j >= 0);
  const others = allowed.filter((j) => j !== i);
  if (others.length === 0 && allowed.length === 1) {
    box.classList.add("done");
    box.textContent = `✓ Token ${name(i)} sees only itself: its one weight is ` +
      `${fmt(data.trace.weights[i][i], 3)}, and its output is its own value.`;
  } else if (allowed.length === 0) {
    box.textContent = `Token ${name(i)} sees nothing now (its row is all zeros): allow its own ` +
      `cell, row ${i}, column ${i}.`;
  } else {
    box.textContent = `Not yet: token ${name(i)} may also attend to ${others.map(name).join(", ")}` +
      (allowed.includes(i) ? "" : `, and not to itself`) + `: click those cells in row ${i}.`;
  }
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
    const text = $("#mask-seed").value.trim();
    const seed = Number(text);
    const bad = text === "" || !Number.isInteger(seed) || seed < 0;
    $("#mask-seed").classList.toggle("bad", bad);
    if (bad) {
      showError(name, new ApiError(0, SEED_PROBLEM));
      return;
    }
    state.seed = seed;
    show();
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
  $("#mask-seed").classList.remove("bad");
  $("#mask-uniform").checked = state.uniform;
  writePresetControls();
}

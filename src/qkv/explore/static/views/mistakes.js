// View 5 · Common mistakes: the lesson's three mistakes, each a toggle. The right attention and
// the mistaken one side by side, both computed by qkv (POST /api/mistakes).
import { Channel } from "../core/api.js";
import { announce, el, fmt } from "../core/dom.js";
import { legend } from "../core/legend.js";
import { state, writeURL } from "../core/state.js";
import { matrixTable } from "../core/table.js";
import { mount as mountDkRule, show as showDkRule } from "../lesson/dk_rule.js";

export const name = "mistakes";
export const READS = {
  "/api/mistakes": ["d_model", "d_k", "notes", "right.scale", "right.weights", "right.row_sums",
    "right.col_sums", "right.output", "wrong.scale", "wrong.weights", "wrong.row_sums",
    "wrong.col_sums", "wrong.output"],
  "/api/heads/sizes": ["models.name", "models.here", "models.decoder", "models.layers",
    "models.heads", "models.kv_heads", "models.d_model", "models.d_k", "models.context",
    "models.kv_per_token", "models.source", "missing"],
};

let root;
const $ = (sel) => root.querySelector(sel);

const TOGGLES = [["#mistake-scale", "wrong_scale"], ["#mistake-axis", "wrong_axis"],
  ["#mistake-swap", "swap_kv"]];
const channel = new Channel(name, "/api/mistakes", render);

export function show() {
  channel.send({ ...state.mistakes });
  showDkRule(); // the rule behind d_k, under the mistakes
}

function render(data) {
  const dv = `first 4 of d_v = ${data.d_k}`;
  const side = (testName, title, r) => el("div", { cls: "step" }, [
    el("h4", {}, `${title} (scale ${fmt(r.scale)})`),
    el("p", { cls: "note" }, "weights: rows are queries, Σ per row and per column"),
    matrixTable(`${testName}-weight`, r.weights, "q", "k",
      { heat: true, digits: 3, rowSums: r.row_sums, colSums: r.col_sums, dims: ["n_q", "n_k"] }),
    el("p", { cls: "note" }, "output, first 4 of the d_v numbers"),
    matrixTable(`${testName}-output`, r.output.map((row) => row.slice(0, 4)), "q", "d",
      { digits: 3, dims: ["n_q", dv] }),
  ]);
  $("#mistakes-result").replaceChildren(
    el("p", { cls: "note" }, `one head of a MiniLM-sized layer: d_model = ${data.d_model}, ` +
      `${data.d_model / data.d_k} heads of d_k = ${data.d_k}; q, k, v entries ~ N(0, 1)`),
    el("ul", { cls: "mistake-notes", "data-testid": "mistake-notes" },
      data.notes.map((n) => el("li", {}, n))),
    el("div", { cls: "steps" }, [side("right", "right", data.right),
      side("wrong", "with the mistakes", data.wrong)]),
    legend("mistakes-legend"));
  renderTask(data);
  announce(data.notes.join(". "));
}

const ONE = 1e-9; // a sum this close to 1 is 1 (float64 sums of n ≤ 16 weights)

/** "Find the toggle that makes every column sum to 1", from the mistaken side's sums. */
function renderTask(data) {
  const box = $('[data-testid="task-columns"]');
  const range = (xs) => `${fmt(Math.min(...xs), 3)} to ${fmt(Math.max(...xs), 3)}`;
  const cols = data.wrong.col_sums;
  const rows = data.wrong.row_sums;
  const done = cols.every((x) => Math.abs(x - 1) < ONE);
  box.classList.toggle("done", done);
  box.textContent = done
    ? `✓ Every column now sums to 1 and the rows sum to ${range(rows)}: softmax ran over the ` +
      "queries (axis −2), so a query's weights are no longer a distribution over the keys."
    : `Not yet: on the right-hand side the columns sum to ${range(cols)} (the rows to ` +
      `${range(rows)}).`;
}

export function mount(section) {
  root = section;
  mountDkRule(section);
  for (const [id, key] of TOGGLES) {
    $(id).addEventListener("change", () => {
      state.mistakes[key] = $(id).checked;
      writeURL();
      show();
    });
  }
}

export function sync() {
  for (const [id, key] of TOGGLES) $(id).checked = state.mistakes[key];
}

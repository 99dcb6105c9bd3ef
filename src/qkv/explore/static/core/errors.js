// Errors: one per view, shown in the page's banner while that view is open. While a view has
// an error, what it drew before belongs to other inputs: its section carries data-stale="1",
// the CSS outlines its results ([data-result]) in dashed red, and the banner says so.
//
// The banner speaks the learner's words: what to change, named by the control's own label.
// A server's field path ("mask.presets[0].before") and HTTP status stay in the console and the
// API; a view names its controls in LABELS ({field path pattern: label}), see wordsFor.
import { $, el } from "./dom.js";
import { state } from "./state.js";

const errors = {};
const labels = {}; // view → [[RegExp of a field path, label or (match) → label], ...]

/** A view's controls by the request fields they fill: {"mask.presets[i].before": "window ·
 * before", "keys[i]": (m) => `k${m[1]}`}. In a pattern, [i] stands for any index (captured in
 * order); a path matches a pattern when it starts with it. */
export function setLabels(view, table = {}) {
  labels[view] = Object.entries(table).map(([pattern, label]) => {
    const source = pattern.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
      .replace(/\\\[i\\\]/g, "\\[(\\d+)\\]");
    return [new RegExp(`^${source}(?![\\w])`), label];
  });
}

/** "distractor_lags[2]" → "distractor lags": a field no view has named, said as words. */
function plainWords(field) {
  const last = field.split(".").filter((p) => p !== "").pop() || "";
  return last.replace(/\[\d+\]/g, "").replace(/_/g, " ");
}

/** The sentence the banner shows for err in view: the page's own words (status 0) as they
 * are; a server's problems each as "label: message"; never a field path or an HTTP code. */
export function wordsFor(view, err) {
  const problems = err.problems || [];
  if (!err.status || problems.length === 0) return stripPaths(view, err.message);
  const said = problems.map(({ field, message: text, words }) => {
    const message = stripPaths(view, words || text);
    if (!field) return message;
    for (const [pattern, label] of labels[view] || []) {
      const m = field.match(pattern);
      if (m) return `${typeof label === "function" ? label(m) : label}: ${message}`;
    }
    return `${plainWords(field)}: ${message}`;
  });
  return [...new Set(said)].join("; ");
}

/** A server sentence that names a field path in its text ("mask.presets[0] (documents) has 5
 * ids…"): the path replaced by its control's label. */
function stripPaths(view, message) {
  // a path: words joined by "." with at least one [index] ("e.g." is no path)
  return message.replace(/\b[a-z_]+(?:\.[a-z_]+)*\[\d+\](?:\.[a-z_]+|\[\d+\])*/g, (field) => {
    for (const [pattern, label] of labels[view] || []) {
      const m = field.match(pattern);
      if (m) return typeof label === "function" ? label(m) : label;
    }
    return plainWords(field);
  });
}

const refusals = {}; // view → how many times the page itself refused an input (status 0)

/** A count that changes whenever the page refuses an input of `view` (core/api.js: an answer
 * to a request sent before that refusal is for inputs no longer on screen, and is dropped). */
export function refusalMark(view) {
  return refusals[view] || 0;
}

/** Remember view's error (an ApiError or any Error) and show it if the view is open. */
export function showError(view, err) {
  if (!err.status) refusals[view] = refusalMark(view) + 1;
  errors[view] = wordsFor(view, err);
  markStale(view, true);
  renderError();
}

/** The view's last request succeeded: forget its error. */
export function clearError(view) {
  delete errors[view];
  markStale(view, false);
  renderError();
}

/** Does the view show a result drawn from earlier inputs? */
function hasResult(section) {
  return Array.from(section.querySelectorAll("[data-result]")).some((node) =>
    node.childElementCount > 0 || node.textContent.trim() !== "");
}

function markStale(view, stale) {
  const section = $(`#view-${view}`);
  if (!section) return;
  if (stale && hasResult(section)) section.dataset.stale = "1";
  else delete section.dataset.stale;
}

/** Show the open view's error, if any, in the banner. */
export function renderError() {
  const box = $("#error");
  const message = errors[state.view];
  box.hidden = !message;
  box.textContent = message || "";
  const section = $(`#view-${state.view}`);
  if (message && section && section.dataset.stale === "1") {
    box.append(el("span", { cls: "stale-said", "data-testid": "stale-said" },
      "What this view shows below (outlined in dashed red) is from the last inputs that worked."));
  }
}

// Errors: one per view, shown in the page's banner while that view is open. While a view has
// an error, what it drew before belongs to other inputs: its section carries data-stale="1",
// the CSS outlines its results ([data-result]) in dashed red, and the banner says so.
import { $, el } from "./dom.js";
import { state } from "./state.js";

const errors = {};

/** Remember view's error (an ApiError or any Error) and show it if the view is open. */
export function showError(view, err) {
  errors[view] = err.status ? `${err.message} (HTTP ${err.status})` : err.message;
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

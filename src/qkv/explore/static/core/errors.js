// Errors: one per view, shown in the page's banner while that view is open.
import { $ } from "./dom.js";
import { state } from "./state.js";

const errors = {};

/** Remember view's error (an ApiError or any Error) and show it if the view is open. */
export function showError(view, err) {
  errors[view] = err.status ? `${err.message} (HTTP ${err.status})` : err.message;
  renderError();
}

/** The view's last request succeeded: forget its error. */
export function clearError(view) {
  delete errors[view];
  renderError();
}

/** Show the open view's error, if any, in the banner. */
export function renderError() {
  const box = $("#error");
  const message = errors[state.view];
  box.hidden = !message;
  box.textContent = message || "";
}

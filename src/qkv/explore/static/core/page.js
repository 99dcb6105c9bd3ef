// The page around the views: the tabs, which view is open, the URL hash, start-up.
//
// A view is a module with this interface (see views/*.js and docs/explore.md):
//   name            its key: the section #view-<name>, the tab [data-view=<name>], state.view
//   READS           {endpoint: [fields of the answer it reads]}, checked against the server's
//                   response schemas by tests/test_explore_schemas.py
//   mount(root)     once: keep root (its <section>), attach event listeners
//   sync()          the state (after a hash change) → the view's controls
//   show()          the view was opened: ask the server and draw the answer
//   prepare()       optional, async, before mount: fetch what the view needs once
//   LABELS          optional, {request field path: the control's label}, so a server's
//                   complaint names the control the learner sees (core/errors.js)
import { $, $$ } from "./dom.js";
import { setPending } from "./api.js";
import { renderError, setLabels } from "./errors.js";
import { loadColors } from "./legend.js";
import { loadURL, setViewNames, state, writeURL } from "./state.js";

let views = [];

/** Open view `name`: show its section, select its tab, fetch and draw it. */
export function showView(name) {
  state.view = name;
  for (const view of views) {
    $(`#view-${view.name}`).hidden = view.name !== name;
    const tab = $(`[data-view="${view.name}"]`);
    tab.setAttribute("aria-selected", String(view.name === name));
    tab.tabIndex = view.name === name ? 0 : -1; // one tab stop; ←/→ move between tabs
  }
  renderError();
  writeURL();
  views.find((v) => v.name === name).show();
}

function applyState() {
  for (const view of views) view.sync();
  showView(state.view);
}

/** Start the page with these views (in tab order). */
export async function start(registry) {
  views = registry;
  setViewNames(views.map((v) => v.name));
  setPending(+1); // the page itself is still starting: tests wait for "0"
  await Promise.all([loadColors(), ...views.map((v) => (v.prepare ? v.prepare() : null))]);
  loadURL();
  for (const view of views) {
    setLabels(view.name, view.LABELS);
    view.mount($(`#view-${view.name}`));
  }
  for (const button of $$("[data-view]")) {
    button.addEventListener("click", () => showView(button.dataset.view));
  }
  $("nav[role=tablist]").addEventListener("keydown", (event) => {
    const at = views.findIndex((v) => v.name === state.view);
    const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: views.length - 1 }[event.key];
    if (to === undefined) return;
    event.preventDefault();
    const name = views[(to + views.length) % views.length].name;
    showView(name);
    $(`[data-view="${name}"]`).focus();
  });
  window.addEventListener("hashchange", () => {
    if (loadURL()) applyState();
  });
  applyState();
  setPending(-1);
}

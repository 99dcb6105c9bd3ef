// qkv's explorer views in a notebook (an anywidget front end). The view modules are the
// explorer's own (explore/static/views/*.js), run unchanged; only three things differ from the
// page, each through a documented hook of the explorer's core:
//   - the API channel's transport (core/api.js setTransport): a request goes to the kernel as a
//     widget message, and the kernel answers with the explorer's own compute functions;
//   - the root the core's page-wide lookups search (core/dom.js setRoot): this widget's element,
//     so the error banner and the screen-reader announcer are the widget's own;
//   - where the state is kept (core/state.js setPersist): in the widget's synced `state`, not in
//     the notebook page's URL.
// The kernel computes every number; this module, like the page, only draws.
import { ApiError, setTransport } from "../explore/static/core/api.js";
import { setRoot } from "../explore/static/core/dom.js";
import { setLabels } from "../explore/static/core/errors.js";
import { loadColors } from "../explore/static/core/legend.js";
import { setPersist, state } from "../explore/static/core/state.js";
import * as masks from "../explore/static/views/masks.js";
import * as model from "../explore/static/views/model.js";
import * as vectors from "../explore/static/views/vectors.js";

const VIEWS = { vectors, masks, model };

/** A transport over the widget's messages: {kind: "request", id, path, body} to the kernel,
 * {kind: "answer", id, status, data | detail} back. Every view of the model hears every answer,
 * so ids carry this view's own tag. Returns [transport, stop listening]. */
function kernelTransport(widgetModel) {
  const tag = Math.random().toString(36).slice(2);
  let next = 0;
  const waiting = new Map();
  const onAnswer = (msg) => {
    if (!msg || msg.kind !== "answer" || !waiting.has(msg.id)) return;
    const { resolve, reject } = waiting.get(msg.id);
    waiting.delete(msg.id);
    if (msg.status === 200) resolve(msg.data);
    else reject(new ApiError(msg.status, msg.detail));
  };
  widgetModel.on("msg:custom", onAnswer);
  const transport = (path, body) => new Promise((resolve, reject) => {
    next += 1;
    const id = `${tag}-${next}`;
    waiting.set(id, { resolve, reject });
    widgetModel.send({ kind: "request", id, path, body: body === undefined ? null : body });
  });
  return [transport, () => widgetModel.off("msg:custom", onAnswer)];
}

/** Draw the view named by the widget's `view` trait, from its `state`. data.sections holds each
 * view's markup (its <section> of the explorer's index.html). */
export async function render({ model: widgetModel, el, data }) {
  const name = widgetModel.get("view");
  const view = VIEWS[name];
  if (!view || !data.sections[name]) {
    el.textContent = `qkv widget: no view named “${name}” (views: ${Object.keys(VIEWS)})`;
    return;
  }
  const root = document.createElement("div");
  root.className = "qkv-widget";
  // Keys typed in the widget stay in it. Jupyter's shortcuts (e.g. "a", insert a cell; ↓, next
  // cell) are Lumino key bindings heard on the document. JupyterLab hears keys bubbling up, so
  // they stop at this root (the views' own handlers have run by then); Notebook 7 hears them in
  // the capture phase, before the widget does, and then Lumino skips a key whose target carries
  // data-lm-suppress-shortcuts — so whatever takes focus in the widget is marked with it.
  root.addEventListener("focusin", (event) => {
    event.target.setAttribute("data-lm-suppress-shortcuts", "true");
  });
  root.addEventListener("keydown", (event) => event.stopPropagation());
  root.innerHTML = '<div id="error" class="error" role="alert" data-testid="error" hidden></div>'
    + '<div id="announce" class="sr-only" aria-live="polite" data-testid="announce"></div>'
    + data.sections[name];
  el.append(root);
  setRoot(root);
  const [transport, stop] = kernelTransport(widgetModel);
  setTransport(transport);
  setPersist(() => {
    widgetModel.set("state", JSON.parse(JSON.stringify(state)));
    widgetModel.save_changes();
  });
  Object.assign(state, widgetModel.get("state"), { view: name });
  await loadColors();
  if (view.prepare) await view.prepare();
  const section = root.querySelector(`#view-${name}`);
  section.hidden = false;
  setLabels(name, view.LABELS);
  view.mount(section);
  view.sync();
  view.show();
  return stop; // anywidget calls it when this view is removed
}

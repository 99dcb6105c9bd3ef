// qkv explore — the page. It draws what the API returns and never computes attention itself:
// every score, weight and output shown comes from qkv (qkv.explain, MiniLM on qkv.nn).
// Page state lives in the URL hash, so a view can be shared and reloaded.
"use strict";

(() => {
  const SVGNS = "http://www.w3.org/2000/svg";
  const $ = (sel, root = document) => root.querySelector(sel);
  const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

  // -- small DOM helpers ---------------------------------------------------------------------
  function el(tag, attrs = {}, children = []) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    for (const child of [].concat(children)) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  function svg(tag, attrs = {}) {
    const node = document.createElementNS(SVGNS, tag);
    setAttrs(node, attrs);
    return node;
  }
  function setAttrs(node, attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key === "cls") node.setAttribute("class", value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
  }

  /** A number rounded for display only (the full value stays in data-value). */
  function fmt(x, digits = 4) {
    if (x === null || x === undefined) return "−∞";
    const shown = Number(x).toFixed(digits);
    return /^-0\.?0*$/.test(shown) ? shown.slice(1) : shown;
  }
  // The one weight colour scale, served by the server from qkv.render.colors (/api/colors):
  // linear from white at 0 to dark blue at 1, as `qkv look` and `qkv.show` draw it.
  let COLORS = {
    low_rgb: [255, 255, 255], high_rgb: [8, 48, 107], ink_threshold: 0.655,
    ink_light: "#ffffff", ink_dark: "#000000", masked: "#d9d9d9", masked_mark: "×",
  };
  function heatRGB(w) {
    const t = Math.max(0, Math.min(1, Number(w)));
    return COLORS.low_rgb.map((lo, c) => Math.round(lo + (COLORS.high_rgb[c] - lo) * t));
  }
  const heat = (w) => `rgb(${heatRGB(w).join(", ")})`;
  const ink = (w) => (w > COLORS.ink_threshold ? COLORS.ink_light : COLORS.ink_dark);
  /** Colour a cell by its weight (background and readable text). */
  function paint(node, w) {
    node.style.background = heat(w);
    node.style.color = ink(w);
  }
  /** A legend for the weight scale: a bar from 0 to 1 with ticks. */
  function legend(testid) {
    const bar = el("div", { cls: "legend-ramp", "aria-hidden": "true" });
    bar.style.background = `linear-gradient(to right, ${heat(0)}, ${heat(1)})`;
    return el("div", { cls: "legend-bar", "data-testid": testid }, [
      el("span", {}, "weight 0"), bar, el("span", {}, "1"),
      el("span", { cls: "legend-masked" }, [el("span", { cls: "sw-masked", "aria-hidden": "true" },
        COLORS.masked_mark), " masked (not allowed)"]),
    ]);
  }
  /** Say something to screen readers (the page's aria-live region). */
  function announce(text) {
    $("#announce").textContent = text;
  }

  // -- state and the URL ---------------------------------------------------------------------
  const SEED_EXAMPLE = {
    q: [[1, 0]],
    k: [[1, 0], [0, 1], [0.7, 0.7]],
    v: [[2, 0], [0, 2], [1, 1]],
  };
  const DEFAULTS = {
    view: "vectors",
    ...structuredClone(SEED_EXAMPLE),
    scale: "",
    dk: 64,
    tau: 1,
    scores: [8, 0],
    tokens: "the cat sat . a dog ran .",
    seed: 0,
    uniform: false,
    presets: [],
    overrides: [],
    sentence: "The cat sat on the mat because it was tired.",
    layer: 0,
    head: 0,
    token: null,
    proj: { shape: "circle", w_q: [[1, 0], [0, 1]], w_k: [[1, 0], [1, 1]], w_v: [[2, 0], [0, 0.5]] },
    mistakes: { wrong_scale: false, wrong_axis: false, swap_kv: false },
    cost: { n: 4096, mask: "causal" },
    s2s: "abcdefghij",
  };
  const VIEWS = ["projections", "vectors", "scale", "masks", "mistakes", "cost", "seq2seq",
    "model"];
  let state = structuredClone(DEFAULTS);

  const matrixToText = (m) => m.map((row) => row.join(",")).join(";");
  function textToMatrix(text) {
    const rows = text.split(";").map((row) => row.split(",").map(Number));
    return rows.every((r) => r.length && r.every(Number.isFinite)) ? rows : null;
  }

  function readURL() {
    const p = new URLSearchParams(location.hash.slice(1));
    const s = structuredClone(DEFAULTS);
    const num = (name, fallback) => {
      const x = Number(p.get(name));
      return p.has(name) && p.get(name) !== "" && Number.isFinite(x) ? x : fallback;
    };
    if (VIEWS.includes(p.get("view"))) s.view = p.get("view");
    for (const name of ["q", "k", "v"]) {
      const m = p.has(name) ? textToMatrix(p.get(name)) : null;
      if (m) s[name] = m;
    }
    if (p.has("scale")) s.scale = p.get("scale");
    s.dk = num("dk", s.dk);
    s.tau = num("tau", s.tau);
    if (p.has("scores")) s.scores = (textToMatrix(p.get("scores")) || [s.scores])[0];
    if (p.has("tokens")) s.tokens = p.get("tokens");
    s.seed = num("seed", s.seed);
    s.uniform = p.get("uniform") === "1";
    try {
      const mask = JSON.parse(p.get("mask") || "null");
      if (mask && Array.isArray(mask.presets)) s.presets = mask.presets;
      if (mask && Array.isArray(mask.overrides)) s.overrides = mask.overrides;
    } catch { /* a hand-edited URL: keep the defaults */ }
    if (p.has("sentence")) s.sentence = p.get("sentence");
    s.layer = num("layer", s.layer);
    s.head = num("head", s.head);
    s.token = num("token", null);
    try {
      const extra = JSON.parse(p.get("more") || "null");
      if (extra && typeof extra === "object") {
        for (const key of ["proj", "mistakes", "cost"]) {
          if (extra[key] && typeof extra[key] === "object") Object.assign(s[key], extra[key]);
        }
        if (typeof extra.s2s === "string") s.s2s = extra.s2s;
      }
    } catch { /* a hand-edited URL: keep the defaults */ }
    return s;
  }

  function writeURL() {
    const p = new URLSearchParams({
      view: state.view,
      q: matrixToText(state.q),
      k: matrixToText(state.k),
      v: matrixToText(state.v),
      scale: state.scale,
      dk: state.dk,
      tau: state.tau,
      scores: state.scores.join(","),
      tokens: state.tokens,
      seed: state.seed,
      uniform: state.uniform ? "1" : "0",
      mask: JSON.stringify({ presets: state.presets, overrides: state.overrides }),
      sentence: state.sentence,
      layer: state.layer,
      head: state.head,
    });
    if (state.token !== null) p.set("token", state.token);
    p.set("more", JSON.stringify({ proj: state.proj, mistakes: state.mistakes, cost: state.cost,
      s2s: state.s2s }));
    history.replaceState(null, "", "#" + p.toString());
  }

  // -- talking to the API --------------------------------------------------------------------
  // data-pending on <html> counts requests queued or in flight, so tests can wait for "0".
  let pending = 0;
  function setPending(delta) {
    pending += delta;
    document.documentElement.dataset.pending = String(pending);
  }

  class ApiError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function post(path, body) {
    let response;
    try {
      response = await fetch(path, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(body),
      });
    } catch {
      throw new ApiError(0, "cannot reach the qkv explore server: is `qkv explore` still running?");
    }
    let data = null;
    try { data = await response.json(); } catch { /* not JSON: described below */ }
    if (!response.ok) {
      const detail = data && typeof data.detail === "string" ? data.detail
        : `the server answered ${response.status}`;
      throw new ApiError(response.status, detail);
    }
    return data;
  }

  /** One endpoint, at most one request in flight; a newer request replaces a queued one. */
  class Channel {
    constructor(name, path, onResult) {
      Object.assign(this, { name, path, onResult, busy: false, queued: undefined });
    }
    send(body) {
      if (this.queued === undefined) setPending(+1);
      this.queued = body;
      if (!this.busy) this.pump();
    }
    async pump() {
      this.busy = true;
      while (this.queued !== undefined) {
        const body = this.queued;
        this.queued = undefined;
        try {
          const data = await post(this.path, body);
          clearError(this.name);
          this.onResult(data, body);
        } catch (err) {
          showError(this.name, err);
        } finally {
          setPending(-1);
        }
      }
      this.busy = false;
    }
  }

  // -- errors: one per view, shown while that view is open -----------------------------------
  const errors = {};
  function showError(view, err) {
    errors[view] = err.status ? `${err.message} (HTTP ${err.status})` : err.message;
    renderError();
  }
  function clearError(view) {
    delete errors[view];
    renderError();
  }
  function renderError() {
    const box = $("#error");
    const message = errors[state.view];
    box.hidden = !message;
    box.textContent = message || "";
  }

  // -- views ---------------------------------------------------------------------------------
  function showView(view) {
    state.view = view;
    for (const name of VIEWS) {
      $(`#view-${name}`).hidden = name !== view;
      const tab = $(`[data-view="${name}"]`);
      tab.setAttribute("aria-selected", String(name === view));
      tab.tabIndex = name === view ? 0 : -1; // one tab stop; ←/→ move between tabs
    }
    renderError();
    writeURL();
    LOADERS[view]();
  }

  // ============================================================================================
  // 1 · Vectors
  // ============================================================================================
  const PLANE = { size: 480, range: 2.5 }; // the plane shows [−range, range]²
  const unit = PLANE.size / (2 * PLANE.range);
  const toPx = (x, y) => [PLANE.size / 2 + x * unit, PLANE.size / 2 - y * unit];
  let vectorsTrace = null;
  let drag = null;
  const vectorsChannel = new Channel("vectors", "/api/trace", (data) => {
    vectorsTrace = data.trace;
    renderSteps(data);
    renderPlane();
  });

  function vectorsRequest() {
    const body = { queries: state.q, keys: state.k, values: state.v };
    const scale = String(state.scale).trim();
    if (scale !== "") body.scale = Number(scale);
    return body;
  }
  function loadVectors() {
    const scale = String(state.scale).trim();
    if (scale !== "" && !Number.isFinite(Number(scale))) {
      showError("vectors", new ApiError(0, `scale: “${scale}” is not a number`));
      return;
    }
    vectorsChannel.send(vectorsRequest());
  }

  // where each kind of arrow writes its label (before collisions are resolved)
  const LABEL_OFFSETS = {
    query: [-10, -10, "end"], key: [10, 18, "start"], value: [10, -8, "start"],
    output: [-10, 20, "end"],
  };
  const KIND_OF = { q: "query", k: "key", v: "value" };
  const NAME_OF = { query: "q", key: "k", value: "v" };
  const GRAB = 16; // px: handles closer than this would hide each other, so they fan out

  function arrowLine(kind, index, vec) {
    const [x1, y1] = toPx(0, 0);
    const [x2, y2] = toPx(vec[0], vec.length > 1 ? vec[1] : 0);
    const g = svg("g", { cls: `arrow ${kind}`, "data-testid": `arrow-${kind}-${index}` });
    g.append(svg("line", { x1, y1, x2, y2, "marker-end": `url(#head-${kind})` }));
    return g;
  }

  /** Labels placed greedily: each one moves down until it overlaps no label placed before. */
  function placeLabels(plane, labels) {
    const boxes = [];
    const overlaps = (b) => boxes.some((o) => b.x0 < o.x1 && o.x0 < b.x1 && b.y0 < o.y1 && o.y0 < b.y1);
    for (const { x, y, anchor, text, kind, testid } of labels) {
      const width = 7.4 * text.length + 4;
      let top = y;
      const box = () => {
        const x0 = anchor === "end" ? x - width : x;
        return { x0, x1: x0 + width, y0: top - 12, y1: top + 3 };
      };
      for (let tries = 0; tries < 12 && overlaps(box()); tries += 1) top += 15;
      boxes.push(box());
      const node = svg("text", { x, y: top, cls: `label ${kind}`, "text-anchor": anchor,
        "data-testid": testid });
      node.textContent = text;
      plane.append(node);
    }
  }

  /** Draggable handles for the arrow heads. Heads at (nearly) the same point fan out around
   * it, each a visible knob with its name, so every vector stays reachable (q0 and k0 both start
   * at (1, 0) in the seeds' example). Each is a button for the keyboard: arrows move it. */
  function placeHandles(plane, items) {
    const groups = [];
    for (const item of items) {
      const [x, y] = toPx(item.vec[0], item.vec.length > 1 ? item.vec[1] : 0);
      const group = groups.find((g) => Math.hypot(g.x - x, g.y - y) < GRAB);
      if (group) group.items.push(item);
      else groups.push({ x, y, items: [item] });
    }
    for (const group of groups) {
      const m = group.items.length;
      group.items.forEach((item, n) => {
        const angle = -Math.PI / 2 + (2 * Math.PI * n) / m;
        const dx = m > 1 ? 20 * Math.cos(angle) : 0;
        const dy = m > 1 ? 20 * Math.sin(angle) : 0;
        const name = `${NAME_OF[item.kind]}${item.index}`;
        const vec = item.vec.map((z) => fmt(z, 2)).join(", ");
        const g = svg("g", {
          cls: m > 1 ? "handle-group fanned" : "handle-group", tabindex: 0, role: "button",
          "aria-label": `${item.kind} ${name} at (${vec}): drag, or use the arrow keys to move it`,
          "data-kind": item.kind, "data-index": item.index, "data-dx": dx, "data-dy": dy,
          "data-testid": `handle-${item.kind}-${item.index}`,
        });
        if (m > 1) {
          g.append(svg("line", { x1: group.x, y1: group.y, x2: group.x + dx, y2: group.y + dy,
            cls: "tether" }));
        }
        g.append(svg("circle", { cx: group.x + dx, cy: group.y + dy, r: m > 1 ? 8 : 10,
          cls: `handle ${item.kind}`, "data-kind": item.kind, "data-index": item.index }));
        if (m > 1) {
          const t = svg("text", { x: group.x + dx, y: group.y + dy + 3.5, cls: "knob-label",
            "text-anchor": "middle" });
          t.textContent = name;
          g.append(t);
        }
        plane.append(g);
      });
    }
  }

  function renderPlane() {
    const plane = $("#plane");
    const focused = document.activeElement && document.activeElement.closest
      ? document.activeElement.closest("#plane [data-testid^='handle-']") : null;
    const refocus = focused ? focused.dataset.testid : null;
    plane.replaceChildren();
    plane.dataset.range = PLANE.range;
    const defs = svg("defs");
    for (const kind of ["query", "key", "value", "output"]) {
      const marker = svg("marker", {
        id: `head-${kind}`, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7,
        markerHeight: 7, orient: "auto-start-reverse", cls: `marker ${kind}`,
      });
      marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z" }));
      defs.append(marker);
    }
    plane.append(defs);
    for (let t = -PLANE.range; t <= PLANE.range; t += 0.5) {
      const [a] = toPx(t, 0);
      const [, b] = toPx(0, t);
      const cls = t === 0 ? "axis" : Number.isInteger(t) ? "grid" : "grid minor";
      plane.append(svg("line", { x1: a, y1: 0, x2: a, y2: PLANE.size, cls }));
      plane.append(svg("line", { x1: 0, y1: b, x2: PLANE.size, y2: b, cls }));
    }
    const selected = 0;
    const weights = vectorsTrace && vectorsTrace.weights.length === state.q.length
      && vectorsTrace.weights[0].length === state.k.length ? vectorsTrace.weights : null;
    const labels = [];
    const handles = [];
    const label = (kind, index, vec, text) => {
      const [x2, y2] = toPx(vec[0], vec.length > 1 ? vec[1] : 0);
      const [dx, dy, anchor] = LABEL_OFFSETS[kind];
      labels.push({ x: x2 + dx, y: y2 + dy, anchor, text, kind,
        testid: `label-${kind}-${index}` });
    };
    // labels are placed in order of importance: queries, keys, outputs, values
    state.q.forEach((q, i) => label("query", i, q, `q${i}`));
    state.k.forEach((k, j) => {
      const w = weights ? `  w=${fmt(weights[selected][j], 3)}` : "";
      label("key", j, k, `k${j}${w}`);
    });
    if ($("#show-outputs").checked && vectorsTrace && weights) {
      vectorsTrace.output.forEach((o, i) => label("output", i, o, `out${i}`));
    }
    if ($("#show-values").checked) {
      state.v.forEach((v, j) => {
        plane.append(arrowLine("value", j, v));
        label("value", j, v, `v${j}`);
        handles.push({ kind: "value", index: j, vec: v });
      });
    }
    state.k.forEach((k, j) => {
      plane.append(arrowLine("key", j, k));
      handles.push({ kind: "key", index: j, vec: k });
    });
    if ($("#show-outputs").checked && vectorsTrace && weights) {
      vectorsTrace.output.forEach((o, i) => plane.append(arrowLine("output", i, o)));
    }
    state.q.forEach((q, i) => {
      plane.append(arrowLine("query", i, q));
      handles.push({ kind: "query", index: i, vec: q });
    });
    placeLabels(plane, labels);
    placeHandles(plane, handles);
    if (refocus) {
      const again = $(`#plane [data-testid="${refocus}"]`);
      if (again) again.focus();
    }
  }

  function vectorText(vec) {
    return vec.join(", ");
  }
  function parseVector(text) {
    const parts = text.split(/[\s,]+/).filter((s) => s !== "");
    const nums = parts.map(Number);
    return parts.length && nums.every(Number.isFinite) ? nums : null;
  }

  function vectorInput(kind, index, vec) {
    const input = el("input", {
      value: vectorText(vec), size: 14, "data-testid": `${kind}-input-${index}`,
      "aria-label": `${kind} ${index}`,
    });
    input.addEventListener("input", () => {
      const parsed = parseVector(input.value);
      const name = { query: "q", key: "k", value: "v" }[kind];
      if (!parsed) {
        input.classList.add("bad");
        showError("vectors", new ApiError(0,
          `${name}${index}: “${input.value}” is not a list of numbers (write e.g. 0.5, -1)`));
        return;
      }
      input.classList.remove("bad");
      moved = "";
      state[name][index] = parsed;
      renderPlane();
      writeURL();
      loadVectors();
    });
    return input;
  }

  function removeButton(label, disabled, onClick, testid) {
    const button = el("button", { cls: "remove", disabled, "data-testid": testid, title: label },
      "×");
    button.addEventListener("click", onClick);
    return button;
  }

  function renderEditors() {
    const queries = $("#query-rows");
    queries.replaceChildren();
    state.q.forEach((q, i) => {
      queries.append(el("div", { cls: "row" }, [
        el("span", { cls: "tag query" }, `q${i}`), vectorInput("query", i, q),
        removeButton(`remove q${i}`, state.q.length === 1, () => {
          state.q.splice(i, 1);
          vectorsChanged();
        }, `remove-query-${i}`),
      ]));
    });
    const keys = $("#key-rows");
    keys.replaceChildren();
    state.k.forEach((k, j) => {
      keys.append(el("div", { cls: "row" }, [
        el("span", { cls: "tag key" }, `k${j}`), vectorInput("key", j, k),
        el("span", { cls: "tag value" }, `v${j}`), vectorInput("value", j, state.v[j]),
        removeButton(`remove k${j} and v${j}`, state.k.length === 1, () => {
          state.k.splice(j, 1);
          state.v.splice(j, 1);
          vectorsChanged();
        }, `remove-key-${j}`),
      ]));
    });
    const dk = state.q[0].length;
    $("#default-scale").textContent = `1/√${dk} = ${fmt(1 / Math.sqrt(dk))}`;
    $("#add-key").disabled = state.k.length >= 64;
    $("#add-query").disabled = state.q.length >= 64;
  }

  function vectorsChanged() {
    renderEditors();
    renderPlane();
    writeURL();
    loadVectors();
  }

  /** A table of one step: rows are queries, columns keys (or output dims). */
  function stepTable(name, title, note, matrix, colPrefix, opts = {}) {
    const sumId = opts.sumId || "rowsum";
    const table = el("table", { cls: "matrix", "data-testid": `table-${name}` });
    const head = el("tr", {}, [el("th")]);
    matrix[0].forEach((_, j) => head.append(el("th", {}, `${colPrefix}${j}`)));
    if (opts.rowSums) head.append(el("th", {}, "Σ"));
    table.append(head);
    matrix.forEach((row, i) => {
      const tr = el("tr", {}, [el("th", {}, `q${i}`)]);
      row.forEach((x, j) => {
        const masked = opts.allowed && !opts.allowed[i][j];
        const td = el("td", { "data-testid": `${name}-${i}-${j}`, "data-value": x },
          masked ? `${COLORS.masked_mark} ${fmt(x)}` : fmt(x));
        if (opts.heat && !masked) paint(td, x);
        if (masked) {
          td.classList.add("denied");
          td.title = "masked: this pair may not attend";
        }
        tr.append(td);
      });
      if (opts.rowSums) {
        tr.append(el("td", { cls: "sum", "data-testid": `${sumId}-${i}`,
          "data-value": opts.rowSums[i] }, fmt(opts.rowSums[i], opts.sumDigits || 4)));
      }
      table.append(tr);
    });
    return el("div", { cls: "step" }, [el("h4", {}, title), el("p", { cls: "note" }, note),
      el("div", { cls: "scroll" }, [table])]);
  }

  function renderSteps(data) {
    const t = data.trace;
    const dk = data.d_k;
    const isDefault = Math.abs(t.scale - 1 / Math.sqrt(dk)) < 1e-15;
    const scaleText = isDefault ? `1/√${dk} = ${fmt(t.scale)}` : fmt(t.scale);
    $("#steps").replaceChildren(
      stepTable("scores", "1 · scores = Q Kᵀ", "each query's dot product with each key", t.scores,
        "k"),
      stepTable("scaled", `2 · scaled = scores × ${scaleText}`,
        "dividing by √d_k keeps softmax out of its hard-argmax regime", t.scaled, "k"),
      stepTable("exp", data.exp.shifted.some(Boolean)
        ? "3 · e^(scaled − row max), and each row's sum" : "3 · e^scaled, and each row's sum",
      expNote(data.exp), data.exp.exp, "k",
      { rowSums: data.exp.sum, sumId: "exp-sum", sumDigits: 3 }),
      stepTable("weight", "4 · weights = softmax(scaled) = e^scaled / sum",
        "each row sums to 1: a soft, graded lookup", t.weights, "k",
        { heat: true, rowSums: data.row_sums, allowed: t.allowed }),
      stepTable("output", "5 · output = weights V", "each query's blend of the values",
        t.output, "d"),
      legend("vectors-legend"),
    );
    const w = t.weights[0].map((x) => fmt(x, 3)).join(", ");
    announce(`${moved}weights of q0: ${w}; output (${t.output[0].map((x) => fmt(x, 3)).join(", ")})`);
  }

  /** Why the seed's hand-added sum can differ in the last digit from the exact one. */
  function expNote(exp) {
    const exact = fmt(exp.sum[0], 3);
    const seed = fmt(exp.seed_sum[0], 3);
    const terms = exp.exp[0].map((x) => fmt(x, 3)).join(" + ");
    if (exp.shifted[0]) {
      return "the scores are too large for e^x, so each row is shifted by its largest score " +
        "first — softmax gives the same weights either way";
    }
    return exact === seed ? `Σ = ${terms} = ${exact}`
      : `Σ = ${exact} exactly; the seed adds the rounded values ${terms} = ${seed} ` +
        "by hand, which is why it prints " + seed;
  }

  function planePoint(event) {
    const plane = $("#plane");
    const pt = plane.createSVGPoint();
    pt.x = event.clientX;
    pt.y = event.clientY;
    const p = pt.matrixTransform(plane.getScreenCTM().inverse());
    const snap = (z) => Math.round(Math.max(-PLANE.range, Math.min(PLANE.range, z)) * 20) / 20;
    return [snap((p.x - PLANE.size / 2) / unit), snap((PLANE.size / 2 - p.y) / unit)];
  }

  let moved = ""; // what the keyboard just moved, said with the next result
  function moveVector(kind, index, vec) {
    const name = NAME_OF[kind];
    state[name][index] = vec;
    const input = $(`[data-testid="${kind}-input-${index}"]`);
    if (input) input.value = vectorText(vec);
    renderPlane();
    loadVectors();
  }

  function setupVectors() {
    const plane = $("#plane");
    plane.addEventListener("pointerdown", (event) => {
      const handle = event.target.closest(".handle-group");
      if (!handle) return;
      moved = "";
      // the head follows the pointer (a fanned-out knob's head jumps the few px to it)
      drag = { kind: handle.dataset.kind, index: Number(handle.dataset.index) };
      plane.setPointerCapture(event.pointerId);
      event.preventDefault();
    });
    plane.addEventListener("pointermove", (event) => {
      if (!drag) return;
      const [x, y] = planePoint(event);
      const vec = state[NAME_OF[drag.kind]][drag.index].slice();
      vec[0] = x;
      if (vec.length > 1) vec[1] = y;
      moveVector(drag.kind, drag.index, vec);
    });
    const stop = () => {
      if (drag) writeURL();
      drag = null;
    };
    plane.addEventListener("pointerup", stop);
    plane.addEventListener("pointercancel", stop);
    plane.addEventListener("keydown", (event) => {
      const handle = event.target.closest(".handle-group");
      const step = { ArrowLeft: [-1, 0], ArrowRight: [1, 0], ArrowUp: [0, 1], ArrowDown: [0, -1] }[
        event.key];
      if (!handle || !step) return;
      event.preventDefault();
      const kind = handle.dataset.kind;
      const index = Number(handle.dataset.index);
      const by = event.shiftKey ? 0.25 : 0.05;
      const vec = state[NAME_OF[kind]][index].slice();
      const clamp = (z) => Math.round(Math.max(-PLANE.range, Math.min(PLANE.range, z)) * 20) / 20;
      vec[0] = clamp(vec[0] + step[0] * by);
      if (vec.length > 1) vec[1] = clamp(vec[1] + step[1] * by);
      moveVector(kind, index, vec);
      writeURL();
      moved = `${NAME_OF[kind]}${index} is now (${vec.map((z) => fmt(z, 2)).join(", ")}); `;
      announce(moved);
    });
    $("#add-query").addEventListener("click", () => {
      const d = state.q[0].length;
      state.q.push(Array.from({ length: d }, (_, i) => (i === 1 ? 1 : 0)));
      vectorsChanged();
    });
    $("#add-key").addEventListener("click", () => {
      const d = state.k[0].length;
      const dv = state.v[0].length;
      state.k.push(Array.from({ length: d }, (_, i) => (i === 0 ? -1 : 0)));
      state.v.push(Array.from({ length: dv }, (_, i) => (i === 0 ? -1 : 0)));
      vectorsChanged();
    });
    $("#scale-input").addEventListener("input", () => {
      state.scale = $("#scale-input").value;
      writeURL();
      loadVectors();
    });
    $("#reset-vectors").addEventListener("click", () => {
      Object.assign(state, structuredClone(SEED_EXAMPLE), { scale: "" });
      $("#scale-input").value = "";
      vectorsChanged();
    });
    for (const id of ["#show-values", "#show-outputs"]) {
      $(id).addEventListener("change", renderPlane);
    }
  }

  function initVectors() {
    $("#scale-input").value = state.scale;
    renderEditors();
    renderPlane();
  }

  // ============================================================================================
  // 2 · Scale
  // ============================================================================================
  const dkFromSlider = (p) => Math.max(1, Math.round(2 ** (p / 10)));
  const sliderFromDk = (dk) => Math.round(10 * Math.log2(Math.max(1, dk)));
  const tauFromSlider = (p) => Number((10 ** (p / 100)).toPrecision(3));
  const sliderFromTau = (tau) => Math.round(100 * Math.log10(tau > 0 ? tau : 1));

  const scaleChannel = new Channel("scale", "/api/scale", renderScale);

  function loadScale() {
    scaleChannel.send({ scores: state.scores, d_k: state.dk, temperature: state.tau, seed: 0,
      n_keys: 16 });
  }

  function bars(name, weights, labels) {
    const box = el("div", { cls: "bars", "data-testid": `bars-${name}` });
    weights.forEach((w, j) => {
      const bar = el("div", { cls: "bar" });
      bar.style.width = `${(100 * w).toFixed(2)}%`;
      box.append(el("div", { cls: "bar-row" }, [
        el("span", { cls: "bar-label" }, labels[j]),
        el("div", { cls: "bar-track" }, [bar]),
        el("span", { cls: "bar-value", "data-testid": `${name}-${j}`, "data-value": w }, fmt(w)),
      ]));
    });
    return box;
  }

  function renderScale(data) {
    const ex = data.example;
    const r = data.random;
    $("#scale-value").textContent = fmt(ex.scale);
    $("#scale-value").dataset.value = ex.scale;
    const labels = ex.raw_scores.map((s) => `score ${fmt(s, 2)}`);
    const table = el("table", { cls: "matrix" }, [
      el("tr", {}, [el("th"), ...ex.scores.map((_, j) => el("th", {}, `key ${j}`))]),
      el("tr", {}, [el("th", {}, `score at d_k = ${ex.reference_d_k}`),
        ...ex.scores.map((s) => el("td", {}, fmt(s)))]),
      el("tr", {}, [el("th", {}, `score at d_k = ${ex.d_k} (× √(${ex.d_k}/${ex.reference_d_k}))`),
        ...ex.raw_scores.map((s, j) =>
          el("td", { "data-testid": `example-raw-${j}`, "data-value": s }, fmt(s)))]),
      el("tr", {}, [el("th", {}, "score × scale"), ...ex.scaled.map((s, j) =>
        el("td", { "data-testid": `example-scaled-${j}`, "data-value": s }, fmt(s)))]),
    ]);
    const gradRow = (name, grads) => el("p", { cls: "grad" }, [
      "gradient reaching each score, ∂w_j/∂score_j = w_j(1 − w_j): ",
      ...grads.flatMap((g, j) => [j ? ", " : "", el("b", { "data-testid": `${name}-${j}`,
        "data-value": g }, g < 1e-3 ? g.toExponential(1) : fmt(g))]),
    ]);
    const last = ex.unscaled_gradient.length - 1;
    $("#scale-example").replaceChildren(
      el("h3", {}, `two keys, one standard deviation apart: [${ex.scores.map((s) => fmt(s, 1)).join(", ")}] at d_k = ${ex.reference_d_k}`),
      el("div", { cls: "scroll" }, [table]),
      el("h4", {}, `divided by τ·√d_k (scale 1/(${ex.temperature}·√${ex.d_k}))`),
      bars("example-weight", ex.weights, labels),
      gradRow("example-grad", ex.gradient),
      el("h4", {}, ex.temperature === 1 ? "not divided (scale 1)" : `not divided by √d_k (scale 1/τ)`),
      bars("example-unscaled-weight", ex.unscaled_weights, labels),
      gradRow("example-unscaled-grad", ex.unscaled_gradient),
      el("p", { cls: "note" }, `As d_k grows the raw scores grow like √d_k: unscaled, the last ` +
        `key's weight and its gradient (${ex.unscaled_gradient[last].toExponential(1)}) vanish; ` +
        `divided by √d_k they stay at ${fmt(ex.weights[last], 3)} and ${fmt(ex.gradient[last], 3)}.`),
    );
    announce(`d_k ${ex.d_k}: scaled weights ${ex.weights.map((w) => fmt(w, 3)).join(", ")}; ` +
      `unscaled ${ex.unscaled_weights.map((w) => fmt(w, 4)).join(", ")}`);
    const keyLabels = r.raw_weights.map((_, j) => `k${j}`);
    const stat = (testid, value) => el("b", { "data-testid": testid, "data-value": value },
      fmt(value, 3));
    $("#scale-random").replaceChildren(
      el("h3", {}, `random vectors: ${r.n_queries} queries × ${r.n_keys} keys, d_k = ${r.d_k}, entries ~ N(0, 1)`),
      el("p", {}, ["std of q · k/τ: ", stat("random-raw-std", r.raw_std), " (√d_k = ",
        stat("random-sqrt-dk", r.sqrt_d_k), "); after × 1/(τ·√d_k): ",
        stat("random-scaled-std", r.scaled_std)]),
      el("p", {}, ["mean largest weight: ", stat("random-raw-max", r.raw_mean_max_weight),
        " unscaled, ", stat("random-scaled-max", r.scaled_mean_max_weight), " scaled"]),
      el("h4", {}, "query 0's weights, unscaled (q · k/τ)"),
      bars("random-raw-weight", r.raw_weights, keyLabels),
      el("h4", {}, "query 0's weights, scaled (q · k/(τ·√d_k))"),
      bars("random-scaled-weight", r.scaled_weights, keyLabels),
    );
  }

  function syncScaleControls() {
    $("#dk-slider").value = sliderFromDk(state.dk);
    $("#dk-value").textContent = `${state.dk}  (√d_k = ${fmt(Math.sqrt(state.dk), 3)})`;
    $("#tau-slider").value = sliderFromTau(state.tau);
    $("#tau-value").textContent = String(state.tau);
    if (document.activeElement !== $("#scale-scores")) {
      $("#scale-scores").value = state.scores.join(", ");
    }
  }

  function setupScale() {
    $("#dk-slider").addEventListener("input", () => {
      state.dk = dkFromSlider(Number($("#dk-slider").value));
      syncScaleControls();
      writeURL();
      loadScale();
    });
    $("#tau-slider").addEventListener("input", () => {
      state.tau = tauFromSlider(Number($("#tau-slider").value));
      syncScaleControls();
      writeURL();
      loadScale();
    });
    $("#scale-scores").addEventListener("input", () => {
      const parsed = parseVector($("#scale-scores").value);
      if (!parsed) {
        showError("scale", new ApiError(0, "scores: write numbers separated by commas, e.g. 8, 0"));
        return;
      }
      state.scores = parsed;
      writeURL();
      loadScale();
    });
  }

  // ============================================================================================
  // 3 · Masks
  // ============================================================================================
  let maskTrace = null;
  const maskChannel = new Channel("masks", "/api/mask", (data) => {
    maskTrace = data.trace;
    renderMaskGrid(data);
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
        const name = input.dataset.param;
        const text = input.value.trim();
        if (name === "ids") {
          preset.ids = text === "" ? documentIds(tokens) : text.split(/[\s,]+/).map(Number);
        } else if (text !== "") {
          preset[name] = Number(text);
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

  function loadMasks() {
    const n = tokenList().length;
    state.overrides = state.overrides.filter((c) => c.i < n && c.j < n);
    state.presets = readPresets();
    writeURL();
    maskChannel.send({ tokens: tokenList(), mask: { presets: state.presets,
      overrides: state.overrides }, seed: state.seed, uniform: state.uniform });
  }

  function renderMaskGrid(data) {
    const t = data.trace;
    $("#mask-repr").textContent = t.mask === null ? "None" : t.mask;
    $("#mask-description").textContent = data.description;
    const table = el("table", { cls: "matrix mask" });
    table.append(el("tr", {}, [el("th", {}, "query ↓ key →"),
      ...data.tokens.map((tok, j) => el("th", { cls: "tok" }, tok)), el("th", {}, "Σ")]));
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

  let refocusCell = null;
  function toggleCell(i, j) {
    if (!maskTrace) return;
    const allowed = !maskTrace.allowed[i][j];
    state.overrides = state.overrides.filter((c) => c.i !== i || c.j !== j);
    state.overrides.push({ i, j, allowed });
    loadMasks();
  }

  function setupMasks() {
    $("#mask-tokens").addEventListener("input", () => {
      state.tokens = $("#mask-tokens").value;
      loadMasks();
    });
    $("#mask-seed").addEventListener("input", () => {
      const seed = Number($("#mask-seed").value);
      if (Number.isInteger(seed) && seed >= 0) {
        state.seed = seed;
        loadMasks();
      }
    });
    $("#mask-uniform").addEventListener("change", () => {
      state.uniform = $("#mask-uniform").checked;
      loadMasks();
    });
    $("#presets").addEventListener("input", loadMasks);
    $("#clear-clicks").addEventListener("click", () => {
      state.overrides = [];
      loadMasks();
    });
  }

  function initMasks() {
    $("#mask-tokens").value = state.tokens;
    $("#mask-seed").value = state.seed;
    $("#mask-uniform").checked = state.uniform;
    writePresetControls();
  }

  // ============================================================================================
  // 4 · A real model
  // ============================================================================================
  let model = null; // the last /api/model/attentions answer
  const modelChannel = new Channel("model", "/api/model/attentions", (data) => {
    model = data;
    state.layer = Math.min(state.layer, data.layers - 1);
    state.head = Math.min(state.head, data.heads - 1);
    if (state.token !== null && state.token >= data.tokens.length) state.token = null;
    $("#model-status").textContent = `${data.tokens.length} tokens`;
    $("#model-name").textContent = `${data.model}, ${data.layers} layers × ${data.heads} heads,`;
    writeURL();
    renderThumbs();
    renderHeat();
    loadNeuron();
  });
  const neuronChannel = new Channel("model", "/api/model/neuron", renderNeuron);

  function loadModel() {
    $("#sentence").value = state.sentence;
    if (model && model.sentence === state.sentence) return;
    $("#model-status").textContent = "computing (the first time also loads the model)…";
    modelChannel.send({ sentence: state.sentence });
  }

  function loadNeuron() {
    if (state.token === null || !model) {
      $("#neuron").replaceChildren(el("p", { cls: "note" },
        "Click a token on the left of the heat map for the neuron view."));
      return;
    }
    neuronChannel.send({ sentence: state.sentence, layer: state.layer, head: state.head,
      token: state.token });
  }

  /** May query i attend to key j in layer l, head h? (A causal model's future keys may not.) */
  const allowedAt = (l, h, i, j) => !model.allowed || model.allowed[l][h][i][j];

  function drawMap(canvas, matrix, allowed) {
    const n = matrix.length;
    const masked = COLORS.masked.match(/\w\w/g).map((x) => parseInt(x, 16));
    canvas.width = n;
    canvas.height = n;
    const ctx = canvas.getContext("2d");
    const image = ctx.createImageData(n, n);
    matrix.forEach((row, i) => row.forEach((w, j) => {
      // the one linear scale, as qkv look / qkv.show; masked pairs grey, never "weight 0"
      const rgb = allowed && !allowed[i][j] ? masked : heatRGB(w);
      const o = 4 * (i * n + j);
      image.data[o] = rgb[0];
      image.data[o + 1] = rgb[1];
      image.data[o + 2] = rgb[2];
      image.data[o + 3] = 255;
    }));
    ctx.putImageData(image, 0, 0);
  }

  function renderThumbs() {
    const box = $("#thumbs");
    box.replaceChildren();
    box.style.setProperty("--heads", model.heads);
    box.append(el("div", { cls: "thumb-label" }, ""));
    for (let h = 0; h < model.heads; h += 1) box.append(el("div", { cls: "thumb-label" }, `h${h}`));
    for (let l = 0; l < model.layers; l += 1) {
      box.append(el("div", { cls: "thumb-label" }, `L${l}`));
      for (let h = 0; h < model.heads; h += 1) {
        const picked = l === state.layer && h === state.head;
        const canvas = el("canvas", {
          cls: picked ? "thumb selected" : "thumb", tabindex: 0, role: "button",
          "aria-pressed": String(picked), "aria-label": `layer ${l}, head ${h}`,
          "data-testid": `thumb-${l}-${h}`, title: `layer ${l}, head ${h}`,
        });
        drawMap(canvas, model.weights[l][h], model.allowed && model.allowed[l][h]);
        const pick = () => {
          state.layer = l;
          state.head = h;
          writeURL();
          renderThumbs();
          renderHeat();
          loadNeuron();
          const again = $(`[data-testid="thumb-${l}-${h}"]`);
          if (again) again.focus();
          announce(`layer ${l}, head ${h} shown`);
        };
        canvas.addEventListener("click", pick);
        canvas.addEventListener("keydown", (event) => {
          if (event.key === "Enter" || event.key === " ") {
            event.preventDefault();
            pick();
          }
        });
        box.append(canvas);
      }
    }
  }

  function renderHeat() {
    const tokens = model.tokens;
    const n = tokens.length;
    const weights = model.weights[state.layer][state.head];
    const cell = Math.max(8, Math.min(28, Math.floor(560 / n)));
    const margin = 90;
    const size = margin + n * cell;
    $("#heat-title").textContent = `layer ${state.layer}, head ${state.head}: ` +
      "row = query token, column = key token";
    const map = svg("svg", { viewBox: `0 0 ${size + 4} ${size + 4}`, width: size + 4,
      height: size + 4, cls: "heatmap", role: "group",
      "aria-label": `heat map of layer ${state.layer}, head ${state.head}: Tab to a row's token; ` +
        "its weights are read out; Enter opens its neuron view" });
    $("#hover-info").textContent = "\u00a0"; // no stale text from a previous sentence
    const highlight = svg("g", { cls: "highlight" });
    const rowBand = svg("rect", { x: margin, width: n * cell, height: cell, cls: "band",
      visibility: "hidden", "data-testid": "highlight-row" });
    const colBand = svg("rect", { y: margin, width: cell, height: n * cell, cls: "band",
      visibility: "hidden", "data-testid": "highlight-col" });
    highlight.append(rowBand, colBand);
    const show = (i, j) => {
      rowBand.setAttribute("y", margin + i * cell);
      colBand.setAttribute("x", margin + j * cell);
      rowBand.setAttribute("visibility", "visible");
      colBand.setAttribute("visibility", "visible");
      rowBand.dataset.index = i;
      colBand.dataset.index = j;
      $$(".tok-label", map).forEach((t) => t.classList.toggle("hot",
        Number(t.dataset.index) === (t.dataset.axis === "row" ? i : j)));
      $("#hover-info").textContent = `“${tokens[i]}” → “${tokens[j]}”: ` +
        (allowedAt(state.layer, state.head, i, j) ? `weight ${fmt(weights[i][j])}`
          : "masked (may not attend)");
      $("#hover-info").dataset.value = weights[i][j];
    };
    weights.forEach((row, i) => row.forEach((w, j) => {
      const ok = allowedAt(state.layer, state.head, i, j);
      const rect = svg("rect", { x: margin + j * cell, y: margin + i * cell, width: cell,
        height: cell, cls: ok ? "hcell" : "hcell masked", "data-testid": `heat-cell-${i}-${j}`,
        "data-value": w, "data-allowed": ok ? "1" : "0" });
      rect.style.fill = ok ? heat(w) : COLORS.masked;
      const tip = svg("title");
      tip.textContent = `“${tokens[i]}” → “${tokens[j]}”: ${ok ? fmt(w) : "masked"}`;
      rect.append(tip);
      rect.addEventListener("mouseenter", () => show(i, j));
      rect.addEventListener("click", () => pickToken(i));
      map.append(rect);
      if (!ok && cell >= 10) { // the mark, so "masked" never reads as "weight 0"
        const mark = svg("text", { x: margin + j * cell + cell / 2, y: margin + i * cell + cell * 0.72,
          cls: "mask-mark", "text-anchor": "middle", "aria-hidden": "true" });
        mark.textContent = COLORS.masked_mark;
        map.append(mark);
      }
    }));
    tokens.forEach((tok, i) => {
      const top = weights[i].map((w, j) => [w, j]).sort((a, b) => b[0] - a[0]).slice(0, 3)
        .map(([w, j]) => `“${tokens[j]}” ${fmt(w, 2)}`).join(", ");
      const rowLabel = svg("text", { x: margin - 4, y: margin + i * cell + cell * 0.7,
        cls: "tok-label row", "text-anchor": "end", "data-axis": "row", "data-index": i,
        "data-testid": `heat-row-${i}`, tabindex: 0, role: "button",
        "aria-label": `row ${i}, “${tok}” attends most to ${top}. Enter: neuron view` });
      rowLabel.textContent = tok;
      rowLabel.addEventListener("mouseenter", () => show(i, i));
      rowLabel.addEventListener("focus", () => show(i, weights[i].indexOf(Math.max(...weights[i]))));
      rowLabel.addEventListener("click", () => pickToken(i));
      rowLabel.addEventListener("keydown", (event) => {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          pickToken(i);
        }
      });
      const x = margin + i * cell + cell * 0.6;
      const colLabel = svg("text", { x, y: margin - 4, cls: "tok-label col",
        transform: `rotate(-60 ${x} ${margin - 4})`, "data-axis": "col", "data-index": i,
        "data-testid": `heat-col-${i}` });
      colLabel.textContent = tok;
      colLabel.addEventListener("mouseenter", () => show(i, i));
      map.append(rowLabel, colLabel);
    });
    map.append(highlight);
    $("#heat").replaceChildren(map);
    $("#heat-legend").replaceChildren(legend("heat-legend-bar"));
  }

  function pickToken(i) {
    state.token = i;
    writeURL();
    loadNeuron();
  }

  function strip(vector, maxAbs, testid) {
    const box = el("div", { cls: "strip", "data-testid": testid, role: "img",
      "aria-label": `${vector.length} numbers from ${fmt(Math.min(...vector), 2)} to ${fmt(Math.max(...vector), 2)}` });
    box.dataset.values = JSON.stringify(vector);
    vector.forEach((x, d) => {
      const c = el("span", { cls: "dim", title: `dim ${d}: ${fmt(x)}` });
      const a = Math.min(1, Math.abs(x) / (maxAbs || 1)).toFixed(3);
      c.style.background = x >= 0 ? `rgba(31, 119, 180, ${a})` : `rgba(214, 39, 40, ${a})`;
      box.append(c);
    });
    return box;
  }

  function renderNeuron(data) {
    const t = data.trace;
    const tokens = data.tokens;
    const q = t.q[0];
    const maxAbs = Math.max(...q.map(Math.abs), ...t.k.flat().map(Math.abs));
    const maxProd = Math.max(...data.products.flat().map(Math.abs));
    const table = el("table", { cls: "neuron" }, [el("tr", {}, [
      el("th", {}, "key token"), el("th", {}, `k_j (${q.length} dims)`), el("th", {}, "q ∘ k_j"),
      el("th", {}, "q · k_j"), el("th", {}, `× ${fmt(t.scale)}`), el("th", {}, "weight"),
      el("th", {}, "v_j"),
    ])]);
    const maxV = Math.max(...t.v.flat().map(Math.abs), ...t.output[0].map(Math.abs));
    tokens.forEach((tok, j) => {
      const w = t.weights[0][j];
      const ok = !t.allowed || t.allowed[0][j];
      const bar = el("div", { cls: "bar" });
      bar.style.width = `${(100 * w).toFixed(2)}%`;
      table.append(el("tr", {}, [
        el("th", { cls: "tok" }, tok),
        el("td", {}, strip(t.k[j], maxAbs, `neuron-k-${j}`)),
        el("td", {}, strip(data.products[j], maxProd, `neuron-prod-${j}`)),
        el("td", { "data-testid": `neuron-score-${j}`, "data-value": t.scores[0][j] },
          fmt(t.scores[0][j], 3)),
        el("td", { "data-testid": `neuron-scaled-${j}`, "data-value": t.scaled[0][j] },
          ok ? fmt(t.scaled[0][j], 3) : COLORS.masked_mark),
        el("td", { cls: "wcell" }, [el("div", { cls: "bar-track" }, [bar]),
          el("span", { "data-testid": `neuron-weight-${j}`, "data-value": w,
            "data-allowed": ok ? "1" : "0" }, ok ? fmt(w) : `${COLORS.masked_mark} masked`)]),
        el("td", {}, strip(t.v[j], maxV, `neuron-v-${j}`)),
      ]));
    });
    table.append(el("tr", { cls: "out-row" }, [
      el("th", { cls: "tok" }, "output"), el("td", { colspan: 5, cls: "note" },
        "Σ_j weight_j · v_j: the head's output for this token"),
      el("td", {}, strip(t.output[0], maxV, "neuron-output")),
    ]));
    announce(`neuron view of “${tokens[data.token]}”: largest weight ` +
      `${fmt(Math.max(...t.weights[0]), 3)}`);
    $("#neuron").replaceChildren(
      el("h3", { "data-testid": "neuron-title" },
        `neuron view: “${tokens[data.token]}” (token ${data.token}) in layer ${data.layer}, ` +
        `head ${data.head} — ` + (data.kv_head === data.head
          ? "qkv.explain(q[h, [i]], k[h], v[h])"
          : `qkv.explain(q[${data.head}, [i]], k[${data.kv_head}], v[${data.kv_head}]): ` +
            `grouped-query attention, query head ${data.head} reads kv head ${data.kv_head}`)),
      el("div", { cls: "row" }, [el("span", { cls: "tag query" }, "q"),
        strip(q, maxAbs, "neuron-q")]),
      el("div", { cls: "scroll" }, [table]),
    );
  }

  function setupModel() {
    $("#model-form").addEventListener("submit", (event) => {
      event.preventDefault();
      state.sentence = $("#sentence").value;
      state.token = null;
      model = null;
      writeURL();
      loadModel();
    });
  }
  // remember which sentence an answer belongs to
  const onModelResult = modelChannel.onResult;
  modelChannel.onResult = (data, body) => onModelResult({ ...data, sentence: body.sentence });

  // ============================================================================================
  // 1 · Projections: X → Q, K, V
  // ============================================================================================
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
  const PROJ_PLANE = { size: 220, range: 2.5 };
  const MATS = [["w_q", "W_Q", "Q", "query"], ["w_k", "W_K", "K", "key"], ["w_v", "W_V", "V", "value"]];
  let learned = null; // the "learned" preset, served by /api/projections/learned
  let projData = null;
  const projChannel = new Channel("projections", "/api/projections", (data, body) => {
    projData = { ...data, request: body };
    renderProjResult(data);
    renderProjPlanes();
  });

  function projRequest() {
    return { x: SHAPES[state.proj.shape], w_q: state.proj.w_q, w_k: state.proj.w_k,
      w_v: state.proj.w_v };
  }
  function loadProjections() {
    renderProjEditors();
    renderProjPlanes();
    projChannel.send(projRequest());
  }

  function projToPx(x, y) {
    const u = PROJ_PLANE.size / (2 * PROJ_PLANE.range);
    return [PROJ_PLANE.size / 2 + x * u, PROJ_PLANE.size / 2 - y * u];
  }

  function shapePlane(name, points, kind, basis) {
    const plane = svg("svg", { viewBox: `0 0 ${PROJ_PLANE.size} ${PROJ_PLANE.size}`,
      width: PROJ_PLANE.size, height: PROJ_PLANE.size, cls: "proj-plane",
      "data-testid": `proj-plane-${name}`, role: "group",
      "aria-label": basis ? `${name} = X ${basis.label}: the shape mapped by ${basis.label}; its two basis arrows are buttons, arrow keys move them`
        : `${name}: the input shape` });
    const [cx, cy] = projToPx(0, 0);
    plane.append(svg("line", { x1: 0, y1: cy, x2: PROJ_PLANE.size, y2: cy, cls: "axis" }));
    plane.append(svg("line", { x1: cx, y1: 0, x2: cx, y2: PROJ_PLANE.size, cls: "axis" }));
    const order = SHAPE_PATHS[state.proj.shape];
    let d = "";
    let pen = false;
    for (const i of order) {
      if (i === null) { pen = false; continue; }
      const [x, y] = projToPx(...points[i]);
      d += `${pen ? "L" : "M"} ${x.toFixed(1)} ${y.toFixed(1)} `;
      pen = true;
    }
    plane.append(svg("path", { d, cls: `shape ${kind}` }));
    points.forEach((p, i) => {
      const [x, y] = projToPx(...p);
      plane.append(svg("circle", { cx: x, cy: y, r: 3, cls: `pt ${kind}` }));
      const t = svg("text", { x: x + 4, y: y - 4, cls: "pt-label" });
      t.textContent = String(i);
      plane.append(t);
    });
    if (basis) {
      basis.m.forEach((row, r) => {
        const [x, y] = projToPx(row[0], row[1]);
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
    const title = el("div", { cls: "plane-title" }, name);
    return el("figure", { cls: "proj-fig" }, [plane, title]);
  }

  function renderProjPlanes() {
    const x = SHAPES[state.proj.shape];
    const mul = (m) => x.map(([a, b]) => [a * m[0][0] + b * m[1][0], a * m[0][1] + b * m[1][1]]);
    // drawn from the server's Q, K, V when they belong to these matrices (they always do once
    // the answer is in); the local product only keeps a drag smooth while the answer is on its way
    const fresh = projData && JSON.stringify(projData.request) === JSON.stringify(projRequest());
    const focused = document.activeElement && document.activeElement.dataset
      ? document.activeElement.dataset.testid : null;
    const figs = [shapePlane("X", x, "x", null)];
    for (const [key, label, name, kind] of MATS) {
      const pts = fresh ? projData[name.toLowerCase()] : mul(state.proj[key]);
      figs.push(shapePlane(name, pts, kind, { key, label, m: state.proj[key] }));
    }
    $("#proj-planes-box").replaceChildren(...figs);
    if (focused) {
      const again = $(`[data-testid="${focused}"]`);
      if (again && again.closest("#proj-planes-box")) again.focus();
    }
  }

  function renderProjEditors() {
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
            showError("projections", new ApiError(0, `${label}[${r}][${c}]: “${input.value}” is not a number`));
            return;
          }
          state.proj[key][r][c] = v;
          writeURL();
          loadProjections();
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
        loadProjections();
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

  function matrixTable(name, matrix, rowPrefix, colPrefix, opts = {}) {
    const table = el("table", { cls: "matrix", "data-testid": `table-${name}` });
    table.append(el("tr", {}, [el("th"), ...matrix[0].map((_, j) => el("th", {}, `${colPrefix}${j}`)),
      ...(opts.sums ? [el("th", {}, "Σ")] : [])]));
    matrix.forEach((row, i) => {
      const tr = el("tr", {}, [el("th", {}, `${rowPrefix}${i}`)]);
      row.forEach((x, j) => {
        const td = el("td", { "data-testid": `${name}-${i}-${j}`, "data-value": x }, fmt(x, opts.digits || 3));
        if (opts.heat) paint(td, x);
        tr.append(td);
      });
      if (opts.sums) {
        tr.append(el("td", { cls: "sum", "data-testid": `${name}-rowsum-${i}`,
          "data-value": opts.sums[i] }, fmt(opts.sums[i], 3)));
      }
      table.append(tr);
    });
    if (opts.colSums) {
      table.append(el("tr", {}, [el("th", {}, "Σ"), ...opts.colSums.map((x, j) =>
        el("td", { cls: "sum", "data-testid": `${name}-colsum-${j}`, "data-value": x }, fmt(x, 3)))]));
    }
    return el("div", { cls: "scroll" }, [table]);
  }

  function renderProjResult(data) {
    const t = data.trace;
    $("#proj-result").replaceChildren(el("div", { cls: "steps" }, [
      el("div", { cls: "step" }, [el("h4", {}, `weights = softmax(Q Kᵀ/√2): ${data.shapes.weights}`),
        matrixTable("proj-weight", t.weights, "q", "k", { heat: true })]),
      el("div", { cls: "step" }, [el("h4", {}, `output = weights V: ${data.shapes.output}`),
        matrixTable("proj-output", t.output, "q", "d")]),
    ]), legend("proj-legend"));
    announce(`projections updated: token 0 attends most to token ${t.weights[0].indexOf(Math.max(...t.weights[0]))}`);
  }

  function setupProjections() {
    $("#proj-shape").addEventListener("change", () => {
      state.proj.shape = $("#proj-shape").value;
      writeURL();
      loadProjections();
    });
    const box = $("#proj-mats");
    let pdrag = null;
    const pointIn = (event, planeEl) => {
      const pt = planeEl.createSVGPoint();
      pt.x = event.clientX;
      pt.y = event.clientY;
      const p = pt.matrixTransform(planeEl.getScreenCTM().inverse());
      const u = PROJ_PLANE.size / (2 * PROJ_PLANE.range);
      const snap = (z) => Math.round(Math.max(-PROJ_PLANE.range, Math.min(PROJ_PLANE.range, z)) * 20) / 20;
      return [snap((p.x - PROJ_PLANE.size / 2) / u), snap((PROJ_PLANE.size / 2 - p.y) / u)];
    };
    box.addEventListener("pointerdown", (event) => {
      const handle = event.target.closest(".basis-handle");
      if (!handle) return;
      pdrag = { key: handle.dataset.mat, row: Number(handle.dataset.row),
        plane: handle.closest("svg").dataset.testid };
      box.setPointerCapture(event.pointerId);
      event.preventDefault();
    });
    box.addEventListener("pointermove", (event) => {
      if (!pdrag) return;
      const planeEl = $(`[data-testid="${pdrag.plane}"]`);
      state.proj[pdrag.key][pdrag.row] = pointIn(event, planeEl);
      loadProjections();
    });
    const stop = () => {
      if (pdrag) writeURL();
      pdrag = null;
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
      loadProjections();
    });
  }

  // ============================================================================================
  // 5 · Common mistakes
  // ============================================================================================
  const mistakesChannel = new Channel("mistakes", "/api/mistakes", renderMistakes);
  function loadMistakes() {
    for (const [id, key] of [["#mistake-scale", "wrong_scale"], ["#mistake-axis", "wrong_axis"],
      ["#mistake-swap", "swap_kv"]]) $(id).checked = state.mistakes[key];
    mistakesChannel.send({ ...state.mistakes });
  }
  function renderMistakes(data) {
    const side = (name, title, r) => el("div", { cls: "step" }, [
      el("h4", {}, `${title} (scale ${fmt(r.scale)})`),
      el("p", { cls: "note" }, "weights: rows are queries, Σ per row and per column"),
      matrixTable(`${name}-weight`, r.weights, "q", "k", { heat: true, sums: r.row_sums, colSums: r.col_sums }),
      el("p", { cls: "note" }, "output, first 4 of the d_v numbers"),
      matrixTable(`${name}-output`, r.output.map((row) => row.slice(0, 4)), "q", "d"),
    ]);
    $("#mistakes-result").replaceChildren(
      el("p", { cls: "note" }, `one head of a MiniLM-sized layer: d_model = ${data.d_model}, ` +
        `${data.d_model / data.d_k} heads of d_k = ${data.d_k}; q, k, v entries ~ N(0, 1)`),
      el("ul", { cls: "mistake-notes", "data-testid": "mistake-notes" },
        data.notes.map((n) => el("li", {}, n))),
      el("div", { cls: "steps" }, [side("right", "right", data.right), side("wrong", "with the mistakes", data.wrong)]),
      legend("mistakes-legend"));
    announce(data.notes.join(". "));
  }
  function setupMistakes() {
    for (const [id, key] of [["#mistake-scale", "wrong_scale"], ["#mistake-axis", "wrong_axis"],
      ["#mistake-swap", "swap_kv"]]) {
      $(id).addEventListener("change", () => {
        state.mistakes[key] = $(id).checked;
        writeURL();
        loadMistakes();
      });
    }
  }

  // ============================================================================================
  // 6 · Cost
  // ============================================================================================
  const costChannel = new Channel("cost", "/api/cost", renderCost);
  const bytes = (b) => {
    const units = ["B", "KB", "MB", "GB", "TB"];
    let u = 0;
    while (b >= 1024 && u < units.length - 1) { b /= 1024; u += 1; }
    return `${b.toFixed(b < 10 && u ? 1 : 0)} ${units[u]}`;
  };
  const big = (x) => x >= 1e9 ? `${(x / 1e9).toFixed(2)}·10⁹` : x >= 1e6 ? `${(x / 1e6).toFixed(2)}·10⁶` : x.toLocaleString("en");
  function loadCost() {
    $("#cost-n").value = Math.round(Math.log2(state.cost.n));
    $("#cost-n-value").textContent = `n = ${state.cost.n.toLocaleString("en")}`;
    $("#cost-mask").value = state.cost.mask;
    costChannel.send({ n: state.cost.n, mask: state.cost.mask });
  }
  function renderCost(data) {
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
    const masked = COLORS.masked.match(/\w\w/g).map((h) => parseInt(h, 16));
    const palette = { 0: masked, 1: heatRGB(0.45), 2: heatRGB(1) };
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
  function setupCost() {
    $("#cost-n").addEventListener("input", () => {
      state.cost.n = 2 ** Number($("#cost-n").value);
      writeURL();
      loadCost();
    });
    $("#cost-mask").addEventListener("change", () => {
      state.cost.mask = $("#cost-mask").value;
      writeURL();
      loadCost();
    });
  }

  // ============================================================================================
  // 7 · Encoder–decoder
  // ============================================================================================
  const seqChannel = new Channel("seq2seq", "/api/seq2seq", renderSeq2seq);
  function loadSeq2seq() {
    $("#seq2seq-input").value = state.s2s;
    seqChannel.send({ input: state.s2s });
  }
  function crossMap(name, r, input) {
    const n = r.weights.length;
    const cell = Math.max(8, Math.min(22, Math.floor(440 / n)));
    const m = 24;
    const map = svg("svg", { width: m + n * cell + 4, height: m + n * cell + 4, cls: "heatmap",
      "data-testid": `${name}-map`, role: "img",
      "aria-label": `${name}: decoder steps down, encoder positions across` });
    r.weights.forEach((row, t) => row.forEach((w, j) => {
      const rect = svg("rect", { x: m + j * cell, y: m + t * cell, width: cell, height: cell,
        cls: "hcell", "data-testid": `${name}-w-${t}-${j}`, "data-value": w });
      rect.style.fill = heat(w);
      const tip = svg("title");
      tip.textContent = `output step ${t} (“${r.output[t]}”) reads input ${j} (“${input[j]}”): ${fmt(w)}`;
      rect.append(tip);
      map.append(rect);
    }));
    [...input].forEach((c, j) => {
      const tx = svg("text", { x: m + j * cell + cell / 2, y: m - 6, "text-anchor": "middle", cls: "tok-label" });
      tx.textContent = c;
      map.append(tx);
    });
    [...r.output].forEach((c, t) => {
      const tx = svg("text", { x: m - 6, y: m + t * cell + cell * 0.75, "text-anchor": "end", cls: "tok-label" });
      tx.textContent = c;
      map.append(tx);
    });
    return map;
  }
  function renderSeq2seq(data) {
    const side = (kind, title) => {
      const r = data[kind];
      const letters = [...r.output].map((c, t) => el("span", {
        cls: c === data.expected[t] ? "ok" : "bad" }, c));
      return el("div", { cls: "step" }, [
        el("h4", {}, title),
        el("p", {}, ["output: ", el("code", { "data-testid": `${kind}-output` }, letters),
          ` — ${r.correct} of ${r.length} right`]),
        crossMap(kind, r, data.input),
      ]);
    };
    $("#seq2seq-result").replaceChildren(
      el("p", {}, ["task: reverse the input. expected ", el("code", { "data-testid": "seq2seq-expected" },
        data.expected), ` (both models were trained on inputs of ${data.trained_lengths[0]} to ` +
        `${data.trained_lengths[1]} symbols, a…p)`]),
      el("div", { cls: "steps" }, [
        side("attention", "attention: cross-attention weights (decoder steps × encoder positions)"),
        side("fixed", "fixed context vector: the decoder sees only the last encoder state"),
      ]), legend("seq2seq-legend"));
    announce(`attention model: ${data.attention.correct} of ${data.attention.length} right; ` +
      `fixed context: ${data.fixed.correct} of ${data.fixed.length}`);
  }
  function setupSeq2seq() {
    $("#seq2seq-form").addEventListener("submit", (event) => {
      event.preventDefault();
      state.s2s = $("#seq2seq-input").value.trim();
      writeURL();
      loadSeq2seq();
    });
  }

  // -- start ---------------------------------------------------------------------------------
  const LOADERS = { projections: loadProjections, vectors: loadVectors, scale: loadScale,
    masks: loadMasks, mistakes: loadMistakes, cost: loadCost, seq2seq: loadSeq2seq,
    model: loadModel };

  function applyState() {
    $("#proj-shape").value = state.proj.shape;
    initVectors();
    syncScaleControls();
    initMasks();
    $("#sentence").value = state.sentence;
    model = null;
    showView(state.view);
  }

  async function start() {
    setPending(+1); // the page itself is still starting: tests wait for "0"
    try { // the one colour scale, from qkv.render (the built-in copy above is the same)
      const [colors, learnedAnswer] = await Promise.all([fetch("/api/colors"),
        fetch("/api/projections/learned")]);
      if (colors.ok) COLORS = await colors.json();
      if (learnedAnswer.ok) learned = await learnedAnswer.json();
    } catch { /* the server is gone: every view will say so */ }
    state = readURL();
    setupProjections();
    setupVectors();
    setupScale();
    setupMasks();
    setupMistakes();
    setupCost();
    setupSeq2seq();
    setupModel();
    for (const button of $$("[data-view]")) {
      button.addEventListener("click", () => showView(button.dataset.view));
    }
    $("nav[role=tablist]").addEventListener("keydown", (event) => {
      const at = VIEWS.indexOf(state.view);
      const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: VIEWS.length - 1 }[event.key];
      if (to === undefined) return;
      event.preventDefault();
      const view = VIEWS[(to + VIEWS.length) % VIEWS.length];
      showView(view);
      $(`[data-view="${view}"]`).focus();
    });
    window.addEventListener("hashchange", () => {
      const fresh = readURL();
      if (JSON.stringify(fresh) !== JSON.stringify(state)) {
        state = fresh;
        applyState();
      }
    });
    applyState();
    setPending(-1);
  }

  document.addEventListener("DOMContentLoaded", start);
})();

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
  const heat = (w) => `rgba(31, 119, 180, ${Math.max(0, Math.min(1, w)).toFixed(3)})`;

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
  };
  const VIEWS = ["vectors", "scale", "masks", "model"];
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
      $(`[data-view="${name}"]`).setAttribute("aria-selected", String(name === view));
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

  // where each kind of arrow writes its label, so that labels of equal vectors do not collide
  const LABEL_OFFSETS = {
    query: [-10, -10, "end"], key: [10, 18, "start"], value: [10, -8, "start"],
    output: [-10, 20, "end"],
  };

  function arrow(kind, index, vec, label) {
    const [x1, y1] = toPx(0, 0);
    const [x2, y2] = toPx(vec[0], vec.length > 1 ? vec[1] : 0);
    const g = svg("g", { cls: `arrow ${kind}`, "data-testid": `arrow-${kind}-${index}` });
    g.append(svg("line", { x1, y1, x2, y2, "marker-end": `url(#head-${kind})` }));
    const [dx, dy, anchor] = LABEL_OFFSETS[kind];
    const text = svg("text", { x: x2 + dx, y: y2 + dy, cls: "label", "text-anchor": anchor });
    text.textContent = label;
    g.append(text);
    if (kind !== "output") {
      g.append(svg("circle", {
        cx: x2, cy: y2, r: 9, cls: "handle", "data-kind": kind, "data-index": index,
        "data-testid": `handle-${kind}-${index}`,
      }));
    }
    return g;
  }

  function renderPlane() {
    const plane = $("#plane");
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
    if ($("#show-values").checked) {
      state.v.forEach((v, j) => plane.append(arrow("value", j, v, `v${j}`)));
    }
    state.k.forEach((k, j) => {
      const w = weights ? `  w=${fmt(weights[selected][j], 3)}` : "";
      plane.append(arrow("key", j, k, `k${j}${w}`));
    });
    if ($("#show-outputs").checked && vectorsTrace && weights) {
      vectorsTrace.output.forEach((o, i) => plane.append(arrow("output", i, o, `out${i}`)));
    }
    state.q.forEach((q, i) => plane.append(arrow("query", i, q, `q${i}`)));
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
    const table = el("table", { cls: "matrix", "data-testid": `table-${name}` });
    const head = el("tr", {}, [el("th")]);
    matrix[0].forEach((_, j) => head.append(el("th", {}, `${colPrefix}${j}`)));
    if (opts.rowSums) head.append(el("th", {}, "Σ"));
    table.append(head);
    matrix.forEach((row, i) => {
      const tr = el("tr", {}, [el("th", {}, `q${i}`)]);
      row.forEach((x, j) => {
        const td = el("td", { "data-testid": `${name}-${i}-${j}`, "data-value": x }, fmt(x));
        if (opts.heat) {
          td.style.background = heat(x);
          if (x > 0.55) td.classList.add("dark");
        }
        if (opts.allowed && !opts.allowed[i][j]) td.classList.add("denied");
        tr.append(td);
      });
      if (opts.rowSums) {
        tr.append(el("td", { cls: "sum", "data-testid": `rowsum-${i}`,
          "data-value": opts.rowSums[i] }, fmt(opts.rowSums[i])));
      }
      table.append(tr);
    });
    return el("div", { cls: "step" }, [el("h4", {}, title), el("p", { cls: "note" }, note), table]);
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
      stepTable("weight", "3 · weights = softmax(scaled) over the keys",
        "each row sums to 1: a soft, graded lookup", t.weights, "k",
        { heat: true, rowSums: data.row_sums, allowed: t.allowed }),
      stepTable("output", "4 · output = weights V", "each query's blend of the values",
        t.output, "d"),
    );
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

  function setupVectors() {
    const plane = $("#plane");
    plane.addEventListener("pointerdown", (event) => {
      const handle = event.target.closest(".handle");
      if (!handle) return;
      drag = { name: { query: "q", key: "k", value: "v" }[handle.dataset.kind],
        index: Number(handle.dataset.index) };
      plane.setPointerCapture(event.pointerId);
      event.preventDefault();
    });
    plane.addEventListener("pointermove", (event) => {
      if (!drag) return;
      const [x, y] = planePoint(event);
      const vec = state[drag.name][drag.index];
      vec[0] = x;
      if (vec.length > 1) vec[1] = y;
      const kind = { q: "query", k: "key", v: "value" }[drag.name];
      const input = $(`[data-testid="${kind}-input-${drag.index}"]`);
      if (input) input.value = vectorText(vec);
      renderPlane();
      loadVectors();
    });
    const stop = () => {
      if (drag) writeURL();
      drag = null;
    };
    plane.addEventListener("pointerup", stop);
    plane.addEventListener("pointercancel", stop);
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
    const labels = ex.scores.map((s, j) => `score ${fmt(s, 2)}`);
    const table = el("table", { cls: "matrix" }, [
      el("tr", {}, [el("th"), ...ex.scores.map((_, j) => el("th", {}, `key ${j}`))]),
      el("tr", {}, [el("th", {}, "score"), ...ex.scores.map((s) => el("td", {}, fmt(s)))]),
      el("tr", {}, [el("th", {}, "score × scale"), ...ex.scaled.map((s, j) =>
        el("td", { "data-testid": `example-scaled-${j}`, "data-value": s }, fmt(s)))]),
    ]);
    $("#scale-example").replaceChildren(
      el("h3", {}, `softmax of the scores [${ex.scores.map((s) => fmt(s, 1)).join(", ")}]`),
      table,
      el("h4", {}, `with scale 1/(τ·√d_k) = 1/(${ex.temperature}·√${ex.d_k})`),
      bars("example-weight", ex.weights, labels),
      el("h4", {}, "without scaling (scale 1)"),
      bars("example-unscaled-weight", ex.unscaled_weights, labels),
      el("p", { cls: "note" },
        "τ → 0 or small d_k: softmax approaches a hard argmax; large τ·√d_k: it approaches uniform."),
    );
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
    $("#mask-repr").textContent = t.mask === null ? "none (every pair may attend)" : t.mask;
    const table = el("table", { cls: "matrix mask" });
    table.append(el("tr", {}, [el("th", {}, "query ↓ key →"),
      ...data.tokens.map((tok, j) => el("th", { cls: "tok" }, tok)), el("th", {}, "Σ")]));
    data.tokens.forEach((tok, i) => {
      const empty = data.fully_masked_rows.includes(i);
      const tr = el("tr", { cls: empty ? "empty-row" : "" }, [el("th", { cls: "tok" }, tok)]);
      t.weights[i].forEach((w, j) => {
        const allowed = t.allowed[i][j];
        const td = el("td", {
          cls: allowed ? "cell" : "cell denied", "data-testid": `mask-cell-${i}-${j}`,
          "data-value": w, "data-allowed": allowed ? "1" : "0",
          title: `${tok} → ${data.tokens[j]}: ${allowed ? "allowed" : "masked"}, weight ${w}. Click to flip.`,
        }, allowed ? fmt(w, 2) : "·");
        if (allowed) {
          td.style.background = heat(w);
          if (w > 0.55) td.classList.add("dark");
        }
        td.addEventListener("click", () => toggleCell(i, j));
        tr.append(td);
      });
      tr.append(el("td", { cls: "sum", "data-testid": `mask-rowsum-${i}`,
        "data-value": data.row_sums[i] }, empty ? "0 (no key)" : fmt(data.row_sums[i], 2)));
      table.append(tr);
    });
    const notes = data.fully_masked_rows.length
      ? `rows ${data.fully_masked_rows.join(", ")} have no allowed key: weights 0 and output 0, not NaN.`
      : "every row has at least one allowed key and sums to 1.";
    $("#mask-grid").replaceChildren(table, el("p", { cls: "note", "data-testid": "mask-note" },
      notes));
  }

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
    writeURL();
    renderThumbs();
    renderHeat();
    loadNeuron();
  });
  const neuronChannel = new Channel("model", "/api/model/neuron", renderNeuron);

  function loadModel() {
    $("#sentence").value = state.sentence;
    if (model && model.sentence === state.sentence) return;
    $("#model-status").textContent = "computing (the first time also loads MiniLM)…";
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

  function drawMap(canvas, matrix) {
    const n = matrix.length;
    canvas.width = n;
    canvas.height = n;
    const ctx = canvas.getContext("2d");
    const image = ctx.createImageData(n, n);
    matrix.forEach((row, i) => row.forEach((w, j) => {
      const a = Math.sqrt(Math.max(0, Math.min(1, w))); // √ so that small weights stay visible
      const o = 4 * (i * n + j);
      image.data[o] = Math.round(255 - a * (255 - 31));
      image.data[o + 1] = Math.round(255 - a * (255 - 119));
      image.data[o + 2] = Math.round(255 - a * (255 - 180));
      image.data[o + 3] = 255;
    }));
    ctx.putImageData(image, 0, 0);
  }

  function renderThumbs() {
    const box = $("#thumbs");
    box.replaceChildren();
    box.append(el("div", { cls: "thumb-label" }, ""));
    for (let h = 0; h < model.heads; h += 1) box.append(el("div", { cls: "thumb-label" }, `h${h}`));
    for (let l = 0; l < model.layers; l += 1) {
      box.append(el("div", { cls: "thumb-label" }, `L${l}`));
      for (let h = 0; h < model.heads; h += 1) {
        const canvas = el("canvas", {
          cls: l === state.layer && h === state.head ? "thumb selected" : "thumb",
          "data-testid": `thumb-${l}-${h}`, title: `layer ${l}, head ${h}`,
        });
        drawMap(canvas, model.weights[l][h]);
        canvas.addEventListener("click", () => {
          state.layer = l;
          state.head = h;
          writeURL();
          renderThumbs();
          renderHeat();
          loadNeuron();
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
      height: size + 4, cls: "heatmap" });
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
      $("#hover-info").textContent = `“${tokens[i]}” → “${tokens[j]}”: weight ` +
        `${fmt(weights[i][j])}`;
    };
    weights.forEach((row, i) => row.forEach((w, j) => {
      const rect = svg("rect", { x: margin + j * cell, y: margin + i * cell, width: cell,
        height: cell, cls: "hcell", "data-testid": `heat-cell-${i}-${j}`, "data-value": w });
      rect.style.fill = heat(Math.sqrt(w));
      rect.addEventListener("mouseenter", () => show(i, j));
      rect.addEventListener("click", () => pickToken(i));
      map.append(rect);
    }));
    tokens.forEach((tok, i) => {
      const rowLabel = svg("text", { x: margin - 4, y: margin + i * cell + cell * 0.7,
        cls: "tok-label row", "text-anchor": "end", "data-axis": "row", "data-index": i,
        "data-testid": `heat-row-${i}` });
      rowLabel.textContent = tok;
      rowLabel.addEventListener("mouseenter", () => show(i, i));
      rowLabel.addEventListener("click", () => pickToken(i));
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
  }

  function pickToken(i) {
    state.token = i;
    writeURL();
    loadNeuron();
  }

  function strip(vector, maxAbs, testid) {
    const box = el("div", { cls: "strip", "data-testid": testid });
    vector.forEach((x) => {
      const c = el("span", { cls: "dim", title: String(x) });
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
      el("th", {}, "key token"), el("th", {}, "k_j (32 dims)"), el("th", {}, "q ∘ k_j"),
      el("th", {}, "q · k_j"), el("th", {}, `× ${fmt(t.scale)}`), el("th", {}, "weight"),
    ])]);
    tokens.forEach((tok, j) => {
      const w = t.weights[0][j];
      const bar = el("div", { cls: "bar" });
      bar.style.width = `${(100 * w).toFixed(2)}%`;
      table.append(el("tr", {}, [
        el("th", { cls: "tok" }, tok),
        el("td", {}, strip(t.k[j], maxAbs, `neuron-k-${j}`)),
        el("td", {}, strip(data.products[j], maxProd, `neuron-prod-${j}`)),
        el("td", { "data-testid": `neuron-score-${j}`, "data-value": t.scores[0][j] },
          fmt(t.scores[0][j], 3)),
        el("td", { "data-testid": `neuron-scaled-${j}`, "data-value": t.scaled[0][j] },
          fmt(t.scaled[0][j], 3)),
        el("td", { cls: "wcell" }, [el("div", { cls: "bar-track" }, [bar]),
          el("span", { "data-testid": `neuron-weight-${j}`, "data-value": w }, fmt(w))]),
      ]));
    });
    $("#neuron").replaceChildren(
      el("h3", { "data-testid": "neuron-title" },
        `neuron view: “${tokens[data.token]}” (token ${data.token}) in layer ${data.layer}, ` +
        `head ${data.head} — qkv.explain(q[h, [i]], k[h], v[h])`),
      el("div", { cls: "row" }, [el("span", { cls: "tag query" }, "q"),
        strip(q, maxAbs, "neuron-q")]),
      table,
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

  // -- start ---------------------------------------------------------------------------------
  const LOADERS = { vectors: loadVectors, scale: loadScale, masks: loadMasks, model: loadModel };

  function applyState() {
    initVectors();
    syncScaleControls();
    initMasks();
    $("#sentence").value = state.sentence;
    model = null;
    showView(state.view);
  }

  function start() {
    setPending(0);
    state = readURL();
    setupVectors();
    setupScale();
    setupMasks();
    setupModel();
    for (const button of $$("[data-view]")) {
      button.addEventListener("click", () => showView(button.dataset.view));
    }
    window.addEventListener("hashchange", () => {
      const fresh = readURL();
      if (JSON.stringify(fresh) !== JSON.stringify(state)) {
        state = fresh;
        applyState();
      }
    });
    applyState();
  }

  document.addEventListener("DOMContentLoaded", start);
})();

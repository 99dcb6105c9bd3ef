// The page's state, and its copy in the URL hash (so a view can be shared and reloaded).
//
// `state` is one object that every view reads and writes; writeURL() mirrors it into the hash,
// readURL() rebuilds it from a hash (a hand-edited hash keeps the defaults for what it breaks).
// The first views keep their historical keys at the top of the hash; a view added later calls
// defineState(key, defaults) and its state travels in the hash's "more" JSON.

export const SEED_EXAMPLE = {
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

// Keys kept in the hash's "more" JSON: an object (merged over its defaults) or a string.
const MORE = {
  proj: { shape: "circle", w_q: [[1, 0], [0, 1]], w_k: [[1, 0], [1, 1]], w_v: [[2, 0], [0, 0.5]] },
  mistakes: { wrong_scale: false, wrong_axis: false, swap_kv: false },
  cost: { n: 4096, mask: "causal" },
  s2s: "abcdefghij",
};

let viewNames = [];

/** The page's state (one object, mutated in place: modules hold on to it). */
export const state = defaults();

function defaults() {
  return { ...structuredClone(DEFAULTS), ...structuredClone(MORE) };
}

/** Register a view's own state: `key` in `state`, saved in the hash's "more" JSON. */
export function defineState(key, initial) {
  if (key in DEFAULTS || key in MORE) throw new Error(`state key ${key} is taken`);
  MORE[key] = structuredClone(initial);
  state[key] = structuredClone(initial);
}

/** The view names the hash may select (in tab order). */
export function setViewNames(names) {
  viewNames = names.slice();
}

const matrixToText = (m) => m.map((row) => row.join(",")).join(";");
function textToMatrix(text) {
  const rows = text.split(";").map((row) => row.split(",").map(Number));
  return rows.every((r) => r.length && r.every(Number.isFinite)) ? rows : null;
}

/** The state a URL hash describes. */
export function readURL(hash = location.hash) {
  const p = new URLSearchParams(hash.slice(1));
  const s = defaults();
  const num = (name, fallback) => {
    const x = Number(p.get(name));
    return p.has(name) && p.get(name) !== "" && Number.isFinite(x) ? x : fallback;
  };
  if (viewNames.includes(p.get("view"))) s.view = p.get("view");
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
      for (const [key, initial] of Object.entries(MORE)) {
        const given = extra[key];
        if (typeof initial === "string" && typeof given === "string") s[key] = given;
        else if (typeof initial === "object" && given && typeof given === "object") {
          Object.assign(s[key], given);
        }
      }
    }
  } catch { /* a hand-edited URL: keep the defaults */ }
  return s;
}

/** Mirror the state into the URL hash (replacing the history entry). */
export function writeURL() {
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
  p.set("more", JSON.stringify(Object.fromEntries(Object.keys(MORE).map((k) => [k, state[k]]))));
  history.replaceState(null, "", "#" + p.toString());
}

/** Load the state from the URL hash; true if it differs from the current state. */
export function loadURL() {
  const fresh = readURL();
  if (JSON.stringify(fresh) === JSON.stringify(state)) return false;
  for (const key of Object.keys(state)) delete state[key];
  Object.assign(state, fresh);
  return true;
}

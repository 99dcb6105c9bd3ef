// The rule behind d_k, for view 5: one head, d_k = d_model; h heads, d_k = d_model / h — with
// the sizes of the models of this explorer (read by the server from their own configurations)
// and of published ones (POST /api/heads/sizes; its reads are declared in views/mistakes.js
// and views/gpt.js); and for view 10, the GPT beside those published models. Every sentence
// is written from those rows.
import { post, setPending } from "../core/api.js";
import { el, fmt } from "../core/dom.js";

let box = null;
let gptBox = null;
let sizes = null; // the one request's promise: the sizes do not change while the page is open
const int = (n) => n.toLocaleString("en");
/** Bytes in words: 1,024 → "1 KiB", 2,147,483,648 → "2 GiB". */
function bytes(n) {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${Number.isInteger(n) ? int(n) : fmt(n, 1)} ${units[i]}`;
}

/** The rows, asked once; a failure is said in place (not in the view's banner, which belongs
 * to the view's own inputs) and asked again next time. */
function ask() {
  if (!sizes) {
    setPending(+1);
    sizes = post("/api/heads/sizes", {}).finally(() => setPending(-1));
    sizes.catch(() => { sizes = null; });
  }
  return sizes;
}

/** A table in a region that scrolls sideways on a narrow screen (and by keyboard). */
function scroller(table) {
  const region = el("div", { tabindex: 0, role: "region", "aria-label": "model sizes; " +
    "scroll sideways to see every column" }, table);
  region.style.overflowX = "auto";
  region.style.maxWidth = "100%";
  return region;
}

function render(data) {
  const rows = data.models;
  const head = el("tr", {}, ["model", "layers", "heads × d_k = d_model", "√d_k", "context",
    "KV cache per token (16-bit)"].map((t) => el("th", { scope: "col" }, t)));
  const body = rows.map((m, i) => el("tr", { "data-testid": `dk-row-${i}` }, [
    el("th", { scope: "row" }, m.here ? `${m.name} · here` : m.name),
    el("td", {}, int(m.layers)),
    el("td", { "data-testid": `dk-split-${i}` }, `${m.heads} × ${m.d_k} = ${int(m.d_model)}`),
    el("td", {}, fmt(Math.sqrt(m.d_k), 2)),
    el("td", {}, int(m.context)),
    el("td", {}, m.kv_per_token === null ? "– (an encoder: it reads, never generates)"
      : `${int(m.kv_per_token)} numbers, ${bytes(2 * m.kv_per_token)}`)]));
  const mini = rows.find((m) => m.here && !m.decoder);
  const gpt = rows.find((m) => m.here && m.decoder);
  const big = rows.filter((m) => !m.here).sort((a, b) => b.d_model - a.d_model)[0];
  const rule = "One head reads the whole width: d_k = d_model. h heads split it: d_k = " +
    "d_model / h — each head has its own W_Q, W_K, W_V of d_model × d_k, and the h outputs " +
    "side by side are d_model wide again, so h heads cost about what one wide head costs. " +
    (mini ? `${mini.name}, whose layer the tables above are sized like: ${mini.heads} heads ` +
      `× ${mini.d_k} = ${mini.d_model}, so each head's scores are divided by √${mini.d_k} ≈ ` +
      `${fmt(Math.sqrt(mini.d_k), 2)}, not by √${mini.d_model} ≈ ` +
      `${fmt(Math.sqrt(mini.d_model), 2)} (the first mistake above).` : "");
  const modern = gpt && big ? `Attention under a modern large language model is this same ` +
    "attention — softmax(QKᵀ/√d_k)V, each token's query allowed only the keys before it — " +
    `at a larger size: ${big.name} has ${big.layers} layers × ${big.heads} heads of d_k = ` +
    `${big.d_k} (${int(big.d_model)} wide) where ${gpt.name} has ${gpt.layers} × ` +
    `${gpt.heads} of ${gpt.d_k} (${int(gpt.d_model)} wide): ` +
    `${int((big.layers * big.heads) / (gpt.layers * gpt.heads))} times the heads. When it ` +
    "generates, each new token's query reads the keys and values of every earlier token " +
    `from a KV cache: 2 × ${big.layers} layers × ${int(big.kv_heads * big.d_k)} = ` +
    `${int(big.kv_per_token)} numbers a token (${bytes(2 * big.kv_per_token)} in 16-bit), ` +
    `${bytes(2 * big.kv_per_token * big.context)} for its full context of ` +
    `${int(big.context)} tokens; ${gpt.name} keeps ${int(gpt.kv_per_token)} a token.` : "";
  box.replaceChildren(
    el("h3", {}, "The rule behind d_k: the heads split d_model"),
    el("p", { "data-testid": "dk-rule" }, rule),
    scroller(el("table", { cls: "gpt-grid", "data-testid": "dk-table" }, [
      el("caption", {}, "sizes read from each model's configuration (the published ones: " +
        rows.filter((m) => !m.here).map((m) => m.source).join("; ") + ")"), head, ...body])),
    el("p", { "data-testid": "dk-modern" }, modern),
    ...data.missing.map((why) => el("p", { cls: "note" }, `Not shown: ${why}`)));
}

/** View 10: this GPT's sizes beside the published models', each row's numbers in words. */
function renderGpt(data) {
  const gpt = data.models.find((m) => m.here && m.decoder);
  const big = data.models.filter((m) => !m.here);
  if (!gpt) {
    gptBox.replaceChildren(el("p", { cls: "note" }, "This GPT's sizes are not shown: " +
      data.missing.join("; ")));
    return;
  }
  const size = (m) => `${m.layers} layers × ${m.heads} heads of d_k = ${m.d_k} ` +
    `(${int(m.d_model)} wide; its KV cache keeps ${int(m.kv_per_token)} numbers a token)`;
  const last = big[big.length - 1];
  gptBox.replaceChildren(el("p", { "data-testid": "gpt-scale" }, `This GPT has ${size(gpt)}. ` +
    "A large language model runs the same causal attention — each query reads only the keys " +
    "before it, each new token's query reads the cached keys and values — at a larger size: " +
    big.map((m) => `${m.name}, ${size(m)}`).join("; ") + `. For ${last.name} that cache is ` +
    `${bytes(2 * last.kv_per_token)} a token in 16-bit, ${bytes(2 * last.kv_per_token *
      last.context)} for its context of ${int(last.context)} tokens. The rule behind d_k, ` +
    "d_k = d_model / heads, is in 5 · Mistakes."));
}

const failed = (target) => (err) => target.replaceChildren(el("p", { cls: "note" },
  `The model sizes are not shown: ${err.message}`));

/** Put the rule at the end of view 5's section. */
export function mount(section) {
  box = el("div", { id: "dk-rule", "data-testid": "dk-rule-box", cls: "dk-rule" });
  section.append(box);
}

export function show() {
  ask().then(render, failed(box));
}

/** View 10: put this GPT among the published models, after `anchor`. */
export function mountGpt(anchor) {
  gptBox = el("div", { id: "gpt-scale-box", "data-testid": "gpt-scale-box" });
  anchor.after(el("h3", {}, "This GPT among large language models"), gptBox);
}

export function showGpt() {
  ask().then(renderGpt, failed(gptBox));
}

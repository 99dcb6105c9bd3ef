// The rule behind d_k, for view 5: one head, d_k = d_model; h heads, d_k = d_model / h — with
// the sizes of the models of this explorer (read by the server from their own configurations)
// and of published ones (POST /api/heads/sizes; its reads are declared in views/mistakes.js).
// Every sentence is written from those rows.
import { Channel } from "../core/api.js";
import { el, fmt } from "../core/dom.js";

let box = null;
let asked = false;
const int = (n) => n.toLocaleString("en");
/** Bytes in words: 1,024 → "1 KiB", 2,147,483,648 → "2 GiB". */
function bytes(n) {
  const units = ["bytes", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${Number.isInteger(n) ? int(n) : fmt(n, 1)} ${units[i]}`;
}

const channel = new Channel("mistakes", "/api/heads/sizes", render, () => { asked = false; });

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

/** Put the rule at the end of view 5's section. */
export function mount(section) {
  box = el("div", { id: "dk-rule", "data-testid": "dk-rule-box", cls: "dk-rule" });
  section.append(box);
}

/** Ask once: the sizes do not change while the page is open. */
export function show() {
  if (!asked) channel.send({});
  asked = true;
}

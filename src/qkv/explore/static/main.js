// qkv explore — the page. It draws what the API returns and never computes attention itself:
// every score, weight and output shown comes from qkv (qkv.explain, MiniLM on qkv.nn).
//
// The views, in tab order (the numbers on the tabs). A new view: one module in views/, one
// line here, and its <section id="view-NAME"> and tab in index.html.
import { start } from "./core/page.js";
import * as projections from "./views/projections.js";
import * as vectors from "./views/vectors.js";
import * as scale from "./views/scale.js";
import * as masks from "./views/masks.js";
import * as mistakes from "./views/mistakes.js";
import * as cost from "./views/cost.js";
import * as seq2seq from "./views/seq2seq.js";
import * as farback from "./views/farback.js";
import * as model from "./views/model.js";
import * as gpt from "./views/gpt.js";

export const VIEWS = [projections, vectors, scale, masks, mistakes, cost, seq2seq, farback,
  model, gpt];

start(VIEWS);

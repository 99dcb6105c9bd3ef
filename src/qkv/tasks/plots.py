"""Line plots for the lesson's experiments, drawn with matplotlib (the ``qkv[plot]`` extra).

Heat maps of attention weights are not drawn here: they go through :mod:`qkv.render`, the one
colour scale for weights. matplotlib is imported lazily, with the non-interactive Agg backend,
so these functions work on a machine without a display.
"""

from __future__ import annotations

from pathlib import Path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight", metadata={"Software": None}
                if path.suffix.lower() == ".png" else None)
    _pyplot().close(fig)
    return path


def seq2seq_plot(result: dict, path) -> Path:
    """Accuracy vs input length for both models (the analogue of Bahdanau et al.'s Fig. 2)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    colors = {"fixed": "tab:red", "attention": "tab:blue"}
    for kind, run in result["models"].items():
        mids = [(r["lengths"][0] + r["lengths"][1]) / 2 for r in run["buckets"]]
        ax.plot(mids, [r["token_accuracy"] for r in run["buckets"]], "o-", color=colors[kind],
                label=f"{kind}: token accuracy ({run['parameters']:,} params)")
        ax.plot(mids, [r["exact_match"] for r in run["buckets"]], "s--", color=colors[kind],
                alpha=0.7, label=f"{kind}: exact match")
    ticks = [f"{r['lengths'][0]}–{r['lengths'][1]}"
             for r in next(iter(result["models"].values()))["buckets"]]
    ax.set_xticks(mids, ticks)
    ax.set_xlabel("input length (held-out bucket)")
    ax.set_ylabel("accuracy (greedy decoding)")
    ax.set_ylim(0, 1.02)
    c = result["config"]
    ax.set_title(f"reverse {c['min_len']}–{c['max_len']} random symbols: "
                 f"fixed context vs attention (seed {c['seed']})", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return _save(fig, path)


def farback_plot(result: dict, path) -> Path:
    """Left: held-out accuracy vs the event's lag bucket for the far-back models run, with
    95% intervals and each model's "chance from" bucket in its label. Right: the accuracy by lag of
    each model during training (its reach growing with the steps)."""
    plt = _pyplot()
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {"attention": ("tab:blue", "o-"), "recency": ("tab:orange", "s-"),
              "gru": ("tab:green", "^-"), "ssm": ("tab:purple", "D-"),
              "rnn": ("tab:red", "v--")}
    first = next(iter(result["models"].values()))["by_lag"]
    xs = list(range(len(first)))
    ticks = [f"{r['lags'][0]}–{r['lags'][1]}" if r["lags"][1] > r["lags"][0]
             else str(r["lags"][0]) for r in first]
    for kind, run in result["models"].items():
        color, style = styles[kind]
        acc = [r["accuracy"] for r in run["by_lag"]]
        err = [[max(a - r["interval"][0], 0.0) for a, r in zip(acc, run["by_lag"], strict=True)],
               [max(r["interval"][1] - a, 0.0) for a, r in zip(acc, run["by_lag"],
                                                               strict=True)]]
        chance = run["chance_from"]
        where = "never" if chance is None else f"chance from lag {chance[0]}"
        ax.errorbar(xs, acc, yerr=err, fmt=style, color=color, capsize=3,
                    label=f"{kind} ({run['parameters']:,} params): {where}")
    ax.axhline(0.5, color="grey", lw=1, ls=":", label="chance")
    ax.set_xticks(xs, ticks, fontsize=8)
    ax.set_xlabel("how far back the event lies (lag bucket, steps)")
    ax.set_ylabel(f"held-out accuracy ({result['per_bucket']} per bucket, 95% interval)")
    ax.set_ylim(0.3, 1.04)
    c = result["config"]
    gate = c.get("gru_gate_bias", 0.0)
    ax.set_title(f"find the type-0 block trade in a {c['window']}-step window "
                 f"({c['steps']} steps, seed {c['seed']}"
                 + (f", GRU gate bias +{gate:g})" if gate else ")"), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    for kind, run in result["models"].items():
        color, style = styles[kind]
        prog = run["progress"]
        picks = sorted({0, len(prog["steps"]) // 4, len(prog["steps"]) // 2,
                        len(prog["steps"]) - 1})
        for j, k in enumerate(picks):
            ax2.plot(xs, prog["accuracy"][k], style, color=color, alpha=0.3 + 0.7 * j /
                     max(len(picks) - 1, 1), ms=4, label=f"{kind}, step {prog['steps'][k]}")
    ax2.axhline(0.5, color="grey", lw=1, ls=":")
    ax2.set_xticks(xs, ticks, fontsize=8)
    ax2.set_xlabel("lag bucket")
    ax2.set_ylabel(f"accuracy during training ({prog['per_bucket']} per bucket)")
    ax2.set_ylim(0.3, 1.04)
    ax2.set_title("during training: each model's reach, step by step", fontsize=10)
    ax2.grid(alpha=0.3)
    ax2.legend(fontsize=6, loc="lower left", ncol=3)
    fig.tight_layout()
    return _save(fig, path)


def mqar_plot(result: dict, path) -> Path:
    """MQAR accuracy against the number of key–value pairs, one panel per sequence length,
    one line per model (Zoology's Fig. 2 in miniature)."""
    plt = _pyplot()
    c = result["config"]
    lengths = c["eval_lengths"]
    fig, axes = plt.subplots(1, len(lengths), figsize=(3.6 * len(lengths), 3.6), sharey=True)
    styles = {"attention": ("tab:blue", "o-"), "ssm-small": ("tab:orange", "s-"),
              "ssm-large": ("tab:green", "^-")}
    trained = set(c["train_lengths"])
    for ax, T in zip(list(getattr(axes, "flat", [axes])), lengths, strict=True):
        for kind, run in result["models"].items():
            color, style = styles[kind]
            cells = [r for r in run["cells"] if r["length"] == T]
            name = kind if run["n_state"] is None else f"{kind} (N = {run['n_state']})"
            ax.plot([r["pairs"] for r in cells], [r["accuracy"] for r in cells], style,
                    color=color, label=f"{name}, {run['parameters']:,} params")
        ax.axhline(1 / c["n_values"], color="grey", lw=1, ls=":", label="chance")
        ax.set_xscale("log", base=2)
        pairs = sorted({r["pairs"] for r in cells})
        ax.set_xticks(pairs, [str(p) for p in pairs])
        ax.set_xlabel("key–value pairs")
        ax.set_title(f"length {T}" + ("" if T in trained else " (longer than trained)"),
                     fontsize=10)
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    first = next(iter(getattr(axes, "flat", [axes])))
    first.set_ylabel("held-out accuracy at the asked keys")
    first.legend(fontsize=7, loc="lower left")
    fig.suptitle(f"MQAR: attention vs a selective state-space model (Mamba block), "
                 f"{c['steps']} steps, seed {c['seed']}", fontsize=10)
    return _save(fig, path)


def scaling_plot(result: dict, path) -> Path:
    """Log–log time and peak memory vs n, with each curve's fitted slope in its label."""
    plt = _pyplot()
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name, series in result["methods"].items():
        pts = series["points"]
        if not pts:
            continue
        n = [p["n"] for p in pts]
        line = ax_t.loglog(n, [p["seconds"] for p in pts], "o-",
                           label=f"{name}: slope {series['time_slope']:.2f}")[0]
        ax_m.loglog(n, [max(p["peak_bytes"], 1) / 2**20 for p in pts], "o-",
                    color=line.get_color(),
                    label=f"{name}: slope {series['memory_slope']:.2f}")
    for ax, what in ((ax_t, "seconds per call"), (ax_m, "peak extra memory (MiB)")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length n")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    c = result["config"]
    fig.suptitle(f"attention vs a linear scan: d={c['d']}, {c['dtype']}; slopes fitted on "
                 f"n ≥ {c['fit_from']}", fontsize=10)
    return _save(fig, path)


def farback_weights_plot(weights, labels, series, path) -> Path:
    """The attention model's weights over the window for a few held-out series, one panel each,
    with the event and the distractor block trades marked."""
    import numpy as np

    plt = _pyplot()
    n, window = weights.shape
    fig, axes = plt.subplots(n, 1, figsize=(7.5, 1.1 * n + 0.6), sharex=True)
    lags = window - np.arange(window)  # column j lies at lag window − j
    for ax, w, label, row in zip(np.atleast_1d(axes), weights, labels, series, strict=True):
        types, sizes, lag = row
        big = (sizes >= 3.0) & (types != 0)
        ax.vlines(lags[big], 0, 1, color="tab:red", lw=0.8, alpha=0.5)
        ax.axvline(lag, color="tab:green", lw=2, alpha=0.5)
        ax.plot(lags, w, color="tab:blue", lw=1)
        ax.set_ylim(0, 1)
        ax.set_ylabel(label, rotation=0, ha="right", va="center", fontsize=8)
        ax.tick_params(labelsize=7)
    ax.invert_xaxis()
    ax.set_xlabel("lag (steps back from the end of the window)")
    fig.suptitle("attention weight per step (blue); the type-0 block trade (green); "
                 "distractor blocks of other types (red)", fontsize=9)
    return _save(fig, path)

"""Figures and tables of the soft-against-hard retrieval experiment
(``kernels.layers.retrieval``).

    plot_soft_vs_hard(soft_vs_hard(), "soft_vs_hard.png")
        accuracy, mean max weight, mean entropy and the output's distance to the nearest
        key's value against the temperature, one colour per noise level
    plot_retrieval_cost(retrieval_cost(), "retrieval_cost.png")
        seconds per query against N, dict lookup and attention, their quartiles as error
        bars, slopes fitted to the medians; the title says when they were timed under load
    accuracy_table(soft_vs_hard()), cost_table(retrieval_cost())
        the same as tables (``kernels.output.Table``): accuracy per noise level, and
        seconds per query per N with the share of the time the process had a core
    load_text(retrieval_cost())
        how much of the time it was ready to run the process had a core while timing

Each plot returns the path it wrote (PNG, through ``kernels.output.save_png``, the
caption under it).  matplotlib is imported on first draw.
"""
import math

import numpy as np

from ..fits import fit_power_law
from ..layers.retrieval import AGREEMENT_LEVEL, DECODING_RADIUS, LOADED_BELOW
from ..output import Column, Table, fmt_percent, fmt_ratio, fmt_seconds, pyplot, ratio, save_png
from ..spread import bounds

TEMPERATURE_LABEL = "temperature T (scores ÷ T; log scale)"


def plot_soft_vs_hard(result, path):
    """Four panels against T for a ``SoftVsHard`` ``result``; writes ``path``, returns it."""
    plt = pyplot()
    # the panels above, the legend below (a row per noise level or style)
    legend_rows = max(len(result.noise_levels), 4)
    footer_inches = 0.35 + 0.2 * legend_rows
    fig = plt.figure(figsize=(13, 9.5 + footer_inches), layout="constrained")
    panels, footer = fig.subfigures(2, 1, height_ratios=(9.5, footer_inches))
    axes = panels.subplots(2, 2, sharex=True)
    accuracy_ax, weight_ax, entropy_ax, error_ax = axes.flat
    temperatures = result.temperatures
    agrees_somewhere = np.isfinite(result.agreement_temperature)
    for level, noise in enumerate(result.noise_levels):
        color = f"C{level % 10}"
        agreed_at = temperatures == result.agreement_temperature[level]
        for ax, curve in ((accuracy_ax, result.soft_accuracy), (weight_ax, result.max_weight),
                          (entropy_ax, result.entropy), (error_ax, result.error_to_nearest)):
            ax.plot(temperatures, curve[level], color=color, marker="o", markersize=3)
            ax.plot(temperatures[agreed_at], curve[level][agreed_at], color=color, marker="*",
                    markersize=14, markeredgecolor="black", linestyle="none")
        accuracy_ax.axhline(result.nearest_accuracy[level], color=color, linestyle="--")
        accuracy_ax.axhline(result.exact_accuracy[level], color=color, linestyle=":", linewidth=2.5)

    accuracy_ax.set_title("Accuracy: does the answer name the queried item?")
    accuracy_ax.set_ylabel("fraction of queries answered correctly")
    accuracy_ax.set_ylim(-0.04, 1.04)

    guide = dict(color="gray", linestyle="-.", linewidth=1)
    weight_ax.set_title("Focus: the largest weight of each query (mean)")
    weight_ax.set_ylabel("mean max weight  max_j w_j")
    weight_ax.axhline(1 / result.n_items, **guide)
    # each guide's label sits where every curve is far from it (cold end, or hot end below)
    weight_ax.annotate(f"uniform weights: 1/N = {1 / result.n_items:.2g}", (temperatures.min(), 1 / result.n_items),
                       xytext=(0, 6), textcoords="offset points", color="gray")

    entropy_ax.set_title("Spread: entropy of each query's weights (mean)")
    entropy_ax.set_ylabel("mean entropy  −Σ w ln w  (nats)")
    entropy_ax.axhline(math.log(result.n_items), **guide)
    entropy_ax.annotate(f"uniform weights: ln N = {math.log(result.n_items):.2f} nats",
                        (temperatures.min(), math.log(result.n_items)), xytext=(0, -14),
                        textcoords="offset points", color="gray")

    error_ax.set_title("Distance of the soft output from the argmax lookup's answer")
    error_ax.set_ylabel("mean |output − value of nearest key|  (one-hot: √2 apart)")
    error_ax.axhline(DECODING_RADIUS, **guide)
    error_ax.annotate("decoding radius √2/2: within it the output names one item",
                      (temperatures.max(), DECODING_RADIUS), xytext=(0, -14), textcoords="offset points",
                      ha="right", color="gray")

    for ax in axes.flat:
        ax.set_xscale("log")
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[1]:
        ax.set_xlabel(TEMPERATURE_LABEL)

    from matplotlib.lines import Line2D

    noise_handles = [Line2D([], [], color=f"C{level % 10}", marker="o", markersize=3, label=(
        f"noise σ = {noise:g}:  exact match {result.exact_accuracy[level]:.2f},  nearest key "
        f"{result.nearest_accuracy[level]:.2f},  largest T with ≥ {AGREEMENT_LEVEL:.0%} agreement "
        + (f"{result.agreement_temperature[level]:.3g}" if agrees_somewhere[level] else "(no T)")))
        for level, noise in enumerate(result.noise_levels)]
    style_handles = [
        Line2D([], [], color="black", marker="o", markersize=3, label="soft: output = softmax(q·Kᵀ / T) V"),
        Line2D([], [], color="black", linestyle="--", label="hard: nearest key, argmax q·k (T-independent)"),
        Line2D([], [], color="black", linestyle=":", linewidth=2.5,
              label="hard: exact match, dict on the key's bytes (T-independent)"),
        Line2D([], [], color="black", marker="*", markersize=12, linestyle="none",
              label=f"largest T at which ≥ {AGREEMENT_LEVEL:.0%} of outputs name the nearest key's item"),
    ]
    footer.legend(handles=noise_handles + style_handles, loc="upper center", ncol=2, fontsize=9)
    fig.suptitle("Self-attention as soft retrieval: from a blend of everything (hot) to the "
                 "nearest-key lookup (cold)", fontsize=13)
    return save_png(fig, path, caption=(
        f"Computed from N = {result.n_items} stored items (keys random unit vectors in R^{result.dim}, values "
        f"one-hot item ids), {result.n_queries} queries per noise level = key + σ·ε with ε ~ N(0, I/d), "
        f"seed {result.seed}. Correct / agrees: the output lies within √2/2 of the target's / the nearest "
        "key's value, so it names that item and no other."))


def plot_retrieval_cost(cost, path):
    """Seconds per query against N on log-log axes for a ``RetrievalCost``: medians joined,
    quartiles as error bars, slopes fitted to the medians; writes ``path``."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 6), layout="constrained")
    sizes = cost.sizes.astype(float)
    for seconds, name, style in ((cost.hash_seconds, "dict lookup (hash the query's bytes, probe)",
                                  dict(color="C0", marker="s")),
                                 (cost.attention_seconds, f"attention over all N keys ({cost.kernel})",
                                  dict(color="C3", marker="o"))):
        medians = np.asarray(seconds, dtype=float)
        low, high = np.array([bounds(figure) for figure in seconds]).T
        fit = fit_power_law(sizes, medians, min_n=0, min_points=2)
        label = name if fit is None else f"{name}: fitted slope {fit.b:.2f}"
        ax.errorbar(sizes, medians, yerr=(medians - low, high - medians), capsize=4, label=label, **style)
    middle = len(sizes) // 2
    ax.plot(sizes, cost.attention_seconds[middle] * sizes / sizes[middle], color="gray", linestyle="--",
            linewidth=1, label="O(N) guide (slope 1)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(sizes, [f"{int(n):,}" for n in cost.sizes])
    ax.minorticks_off()
    ax.set_xlabel("stored items N (log scale)")
    ax.set_ylabel(f"seconds per query (median of {cost.repeats}, bars: quartiles; log scale)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    ratio = cost.attention_seconds[-1] / cost.hash_seconds[-1]
    at_largest = f"at N = {int(cost.sizes[-1]):,} attention took {ratio:,.0f}× a lookup"
    ax.set_title(f"Hash lookup O(1) against attention O(N·d): {at_largest}" + (
        "\nMeasured under load: the machine's other work, not the code's cost" if cost.under_load else ""),
        color="firebrick" if cost.under_load else "black")
    return save_png(fig, path, caption=(
        f"Keys random unit vectors in R^{cost.dim}, values {cost.dim}-wide, seed {cost.seed}; every query a "
        f"stored key.  Attention: one call on {cost.n_queries} queries ÷ {cost.n_queries}, "
        f"{cost.threads} thread(s), {cost.attention_flops[-1] / 1e6:.3g} Mflop per query at the largest N; "
        f"dict: one thread, {cost.hashed_bytes} bytes hashed per query.  While timing, {load_text(cost)}."))


def accuracy_table(result):
    """The accuracy of each way of retrieving, a row per noise level of a ``SoftVsHard``
    ``result``, and where soft retrieval agrees with the nearest key (soft_vs_hard.csv)."""
    return Table("soft_vs_hard", (
        Column("noise", "noise σ", lambda s: f"{s:g}"),
        Column("exact", "exact match (dict)", lambda a: f"{a:.0%}"),
        Column("nearest", "nearest key (argmax q·k)", lambda a: f"{a:.0%}"),
        Column("soft", "soft, best over T", lambda a: f"{a:.0%}"),
        Column("t99", f"largest T with ≥ {AGREEMENT_LEVEL:.0%} agreement", lambda t: f"{t:.3g}"),
        Column("weight", "mean max weight there", lambda w: f"{w:.2f}")),
        [[noise, result.exact_accuracy[level], result.nearest_accuracy[level], result.soft_accuracy[level].max(),
          result.agreement_temperature[level],
          _at_temperature(result.max_weight[level], result.temperatures, result.agreement_temperature[level])]
         for level, noise in enumerate(result.noise_levels)])


def cost_table(cost):
    """Seconds per query of a ``RetrievalCost``, a row per N, and the share of the time its
    threads had a core (retrieval_cost.csv)."""
    return Table("retrieval_cost", (
        Column("n", "stored items N", lambda n: f"{n:,}"),
        Column("dict", "dict lookup per query", fmt_seconds),
        Column("attention", f"attention per query ({cost.kernel})", fmt_seconds),
        Column("ratio", "attention ÷ lookup", fmt_ratio),
        Column("cpu_share", "had a core", fmt_percent)),
        [[int(n), h, a, ratio(a, h), share]
         for n, h, a, share in zip(cost.sizes, cost.hash_seconds, cost.attention_seconds, cost.cpu_share)])


def _at_temperature(values, temperatures, temperature):
    """values[t] at the temperature ``temperature`` (NaN when it is NaN: no such T)."""
    return float(values[temperatures == temperature][0]) if np.isfinite(temperature) else math.nan


def load_text(cost):
    """How much of the time its threads were ready to run the process had a core while
    ``cost`` was timed, one clause: "the process's threads had a core 31%–41% of the time
    they were ready to run, below the 90% under which figures count as measured under load"."""
    known = cost.cpu_share[np.isfinite(cost.cpu_share)]
    if known.size == 0:
        return ("how long the process's threads queued for a core is unknown (this system has no "
                "Linux /proc/self/task/*/schedstat)")
    least, most = known.min(), known.max()
    shares = f"{least:.0%}" if f"{least:.0%}" == f"{most:.0%}" else f"{least:.0%}–{most:.0%}"
    against = "below" if cost.under_load else "at or above"
    # a timing shorter than the scheduler's accounting of it leaves its counters unmoved
    unmeasured = ("" if known.size == cost.cpu_share.size else
                  f" (measured at {known.size} of {cost.cpu_share.size} sizes: at the others the timing "
                  f"ended before the scheduler counted it)")
    return (f"the process's threads had a core {shares} of the time they were ready to run{unmeasured}, "
            f"{against} the {LOADED_BELOW:.0%} under which figures count as measured under load")

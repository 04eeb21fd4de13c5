"""Summaries -> markdown tables, JSON and PNG plots.

  {policy: PolicyRun} --markdown_table--> one row per policy: TTFT P50/P90/P99 short and long,
                                          TPOT P50/P99, deadline misses, completions, throughput
                      --reuse_table--> one row per policy: conversations' later turns (TTFT,
                                          misses), prompt tokens taken from the prefix cache,
                                          tokens the device computed, seconds it was busy
                      --plot_ttft_cdfs--> TTFT CDF per policy, short and long panels (Medha Fig. 9)
                      --plot_ttft_over_time--> TTFT against arrival time (Medha Fig. 1b)
                      --to_json--> the summaries as plain data

matplotlib is imported lazily (only the plots need it). Pure Python.
"""

from __future__ import annotations

import json
import math


def _f(x, digits=2):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, float) and math.isinf(x):
        return "inf"
    if abs(x) >= 1000:
        return f"{x:.0f}"
    return f"{x:.{digits}f}"


def _pct(x):
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f}%"


HEADER = ("| policy | short TTFT P50 / P90 / P99 (s) | long TTFT P50 / P90 / P99 (s) | TPOT P50 / P99 (ms), over target "
          "| deadline miss short / long | first token short / long | completed | throughput (req/s) |\n"
          "|---|---|---|---|---|---|---|---|")


def _ttft(g: dict) -> str:
    """A class's TTFT P50 / P90 / P99 in seconds."""
    return f"{_f(g['ttft_p50'])} / {_f(g['ttft_p90'])} / {_f(g['ttft_p99'])}"


def markdown_row(name: str, s: dict) -> str:
    sh, lo, al = s["short"], s["long"], s["all"]
    return (f"| {name} | {_ttft(sh)} | {_ttft(lo)} | {_f(al['tpot_p50'] * 1e3, 1)} / {_f(al['tpot_p99'] * 1e3, 1)}, {_pct(al.get('tpot_over_target'))} "
            f"| {_pct(sh['deadline_miss_rate'])} / {_pct(lo['deadline_miss_rate'])} "
            f"| {sh['first_token']}/{sh['requests']} / {lo['first_token']}/{lo['requests']} "
            f"| {al['completed']}/{al['requests']} | {_f(al['throughput_rps'], 3)} |")


def markdown_table(summaries: dict[str, dict]) -> str:
    return "\n".join([HEADER] + [markdown_row(n, s) for n, s in summaries.items()])


REUSE_HEADER = ("| policy | prefix cache | follow-up TTFT P50 / P90 / P99 (s) | follow-up deadline miss "
                "| follow-ups with first token | prompt tokens from the cache | cached tokens evicted (M) | tokens computed (M) "
                "| device busy (s) |\n|---|---|---|---|---|---|---|---|---|")


def reuse_row(name: str, s: dict) -> str:
    """Prefix reuse of one run: needs the summary's "device" entry (Experiment.run)."""
    fu, al, dev = s.get("follow_up"), s["all"], s["device"]
    ttft = "-" if fu is None else _ttft(fu)
    miss = "-" if fu is None else _pct(fu["deadline_miss_rate"])
    firsts = "-" if fu is None else f"{fu['first_token']}/{fu['requests']}"
    share = al["cached_tokens"] / al["prompt_tokens"] if al["prompt_tokens"] else math.nan
    return (f"| {name} | {'on' if dev['prefix_caching'] else 'off'} | {ttft} | {miss} | {firsts} "
            f"| {_pct(share)} ({dev['prefix_hit_tokens'] / 1e6:.1f}M) | {dev['prefix_evicted_tokens'] / 1e6:.1f} "
            f"| {dev['computed_tokens'] / 1e6:.1f} "
            f"| {_f(dev['busy_s'], 0)} |")


def reuse_table(summaries: dict[str, dict]) -> str:
    return "\n".join([REUSE_HEADER] + [reuse_row(n, s) for n, s in summaries.items()])


def to_json(path: str, data) -> None:
    def clean(x):
        if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
            return None
        if isinstance(x, dict):
            return {k: clean(v) for k, v in x.items()}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x

    with open(path, "w") as f:
        json.dump(clean(data), f, indent=1, sort_keys=True)


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_STYLES = ("-", "--", "-.", ":")


def _style(i: int) -> dict:
    """Distinct colour and dash per series, so curves that coincide stay visible."""
    return {"color": f"C{i % 10}", "linestyle": _STYLES[i % len(_STYLES)]}


def plot_ttft_cdfs(runs: dict, path: str, title: str = "") -> None:
    """TTFT CDFs per policy, short and long requests in two panels; the curve of a class ends below
    1 when some requests got no first token within the horizon (truncated, as in Medha Fig. 9)."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, cls in zip(axes, ("short", "long")):
        for k, (name, run) in enumerate(runs.items()):
            g = [o for o in run.outcomes if o.is_long == (cls == "long")]
            vals = sorted(o.ttft for o in g if o.ttft is not None)
            if not vals:
                continue
            ys = [(i + 1) / len(g) for i in range(len(vals))]
            ax.step(vals, ys, where="post", label=name, **_style(k))
        ax.set_xscale("log")
        ax.set_xlabel("TTFT (s)")
        ax.set_ylabel("fraction of requests")
        ax.set_title(f"{cls} requests")
        ax.grid(True, alpha=0.3)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ttft_over_time(runs: dict, path: str, title: str = "") -> None:
    """TTFT of each request against its arrival time, one panel per policy (Medha Fig. 1b)."""
    plt = _plt()
    n = len(runs)
    fig, axes = plt.subplots(n, 1, figsize=(10, 1.9 * n + 0.6), sharex=True, squeeze=False)
    for ax, (name, run) in zip(axes[:, 0], runs.items()):
        for is_long, color, label in ((False, "tab:blue", "short"), (True, "tab:red", "long")):
            pts = [(o.arrival, o.ttft) for o in run.outcomes if o.is_long == is_long and o.ttft is not None]
            if pts:
                xs, ys = zip(*pts)
                ax.scatter(xs, ys, s=3 if not is_long else 10, c=color, label=label, alpha=0.6)
        ax.set_yscale("log")
        ax.set_ylabel("TTFT (s)")
        ax.set_title(name, fontsize=9, loc="left")
        ax.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("arrival time (s)")
    axes[0, 0].legend(fontsize=7, loc="upper left")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_lines(xs, series: dict[str, list], path: str, xlabel: str, ylabel: str, title: str = "",
               logy: bool = False) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for k, (name, ys) in enumerate(series.items()):
        ax.plot(xs, ys, marker="o", label=name, **_style(k))
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

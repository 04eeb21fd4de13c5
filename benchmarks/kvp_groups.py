"""KVP groups with their own batches vs one batch replicated over the groups, and SPP's per-token
budget, in the simulator (modelled Llama-3 8B on H100 nodes, TP8 per group).

  python benchmarks/kvp_groups.py [--shorts 3000] [--out benchmarks/results]   (~10 min on 2 cores)

  designs at the same device count (4 groups x TP8 = 32 H100s, kvp_tokens 262,144):
      per_group   each group runs its own batch of the requests placed on it (Mnemosyne)
      replicated  one batch runs on every group (each group computes every token; attention split)
      plus one group alone (TP8, 8 H100s) for scale
  workloads, the default policy (slo), t_target 50 ms:
      offline   N ShareGPT4-like shorts all at t=0: time to finish all -> requests/s, output tokens/s
      offline + one 800K-token request spanning all four groups
      open loop 200 QPS of shorts for 60 s (above both designs' capacity): completed/s, misses, TPOT
  SPP: llama3-8b-a100x16-tp8-spp2, 5% long at 1 QPS for 120 s: TPOT P99 and the largest gap between
      two tokens of any request, slo / edf / sarathi-2048 (a fixed 2048-token chunk)
  --> kvp_groups.md / .json under --out

Deterministic: the same command gives the same numbers (wall-clock times aside). No JAX.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.results_io import provenance, run_info, write_results  # noqa: E402
from medha_jax.sim.experiment import Experiment  # noqa: E402
from medha_jax.sim.profiles import load_profile  # noqa: E402
from medha_jax.sim.workload import RequestSpec, WorkloadSpec, generate  # noqa: E402

GROUP = "model=llama3-8b,device=h100,tp=8"
DESIGNS = {
    "per_group (kvp=4, 32 GPUs)": GROUP + ",kvp=4,kvp_tokens=262144",
    "replicated (kvp=4, 32 GPUs)": GROUP + ",kvp=4,kvp_tokens=262144,kvp_batches=replicated",
    "one group (kvp=1, 8 GPUs)": GROUP,
}
LONG_TOKENS = 800_000


def offline(exp: Experiment, specs: list[RequestSpec]) -> dict:
    t = time.time()
    spans = set()

    def observer(start, end, batch):
        for s in batch.seqs:
            if s.request.prompt_len == LONG_TOKENS:
                spans.add(len(s.page_tables))

    run = exp.run("slo", specs, observer=observer)
    r = run.result
    shorts = [q for q in r.requests if q.prompt_len != LONG_TOKENS]
    longs = [q for q in r.requests if q.prompt_len == LONG_TOKENS]
    return {"makespan_s": r.end_time, "short_done_s": max(q.finish_time for q in shorts),
            "short_req_per_s": len(shorts) / max(q.finish_time for q in shorts),
            "out_tok_per_s": sum(len(q.output_token_ids) for q in r.requests) / r.end_time,
            "tpot_p50": run.summary["all"]["tpot_p50"], "tpot_p99": run.summary["all"]["tpot_p99"],
            "long_ttft_s": (longs[0].first_token_time - longs[0].arrival_time) if longs else None,
            "long_blocks": max(spans) if spans else None, "mean_tick_ms": 1000 * r.busy_time / r.iterations,
            "wall_s": time.time() - t}


def open_loop(exp: Experiment, specs: list[RequestSpec], horizon: float) -> dict:
    run = exp.run("slo", specs, horizon=horizon)
    r = run.result
    done = [q for q in r.requests if q.finish_time is not None]
    return {"completed_per_s": len(done) / horizon, "offered_per_s": len(specs) / horizon,
            "miss_rate": run.summary["all"]["deadline_miss_rate"], "tpot_p50": run.summary["all"]["tpot_p50"],
            "tpot_p99": run.summary["all"]["tpot_p99"]}


def spp_rows() -> dict:
    exp = Experiment(load_profile("llama3-8b-a100x16-tp8-spp2"), t_target=0.05)
    specs = generate(WorkloadSpec(qps=1.0, duration=120, long_fraction=0.05, long_min=131072, long_max=300_000, seed=1))
    out = {}
    for policy in ("slo", "edf", "sarathi-2048"):
        run = exp.run(policy, specs, horizon=600)
        out[policy] = {"tpot_p50": run.summary["all"]["tpot_p50"], "tpot_p99": run.summary["all"]["tpot_p99"],
                       "max_gap": max(st.max_gap for st in run.result.token_stats.values()),
                       "miss_rate": run.summary["all"]["deadline_miss_rate"]}
    return out


def table(first: str, rows: dict[str, dict], columns: list[tuple[str, Callable[[dict], str]]]) -> list[str]:
    """A Markdown table: one row per entry of `rows`, a column per (title, cell of a row's results)."""
    out = [f"| {first} | " + " | ".join(t for t, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    return out + [f"| {name} | " + " | ".join(cell(r) for _, cell in columns) + " |" for name, r in rows.items()]


def render(report: dict) -> list[str]:
    """The Markdown of a report (what main measured, or a results JSON read back)."""
    pg, rep = "per_group (kvp=4, 32 GPUs)", "replicated (kvp=4, 32 GPUs)"
    f = lambda x, d=2: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
    ms = lambda x: "-" if x is None else f"{1000 * x:.1f}"  # noqa: E731
    tpot = ("TPOT P50 / P99 (ms)", lambda r: f"{ms(r['tpot_p50'])} / {ms(r['tpot_p99'])}")
    misses = ("deadline misses", lambda r: f"{100 * r['miss_rate']:.1f}%")
    o, ol, op = report["offline"], report["offline_long"], report["open_loop"]
    return [
        "# KVP groups with their own batches, and SPP's per-token budget (simulator)", "",
        provenance(report), "",
        "Modelled Llama-3 8B on H100 nodes (analytic roofline model, `medha_jax/hardware`), TP8 per kvp "
        "group, kvp_tokens 262,144, the default policy (slo), t_target 50 ms. Done when (issue 15): "
        "short-request throughput on kvp=4 >= 3x the replicated design's at the same device count.", "",
        f"## Offline batch: {report['num_shorts']} ShareGPT4-like shorts at t=0", "",
        *table("design", o, [("time to finish all (s)", lambda r: f(r["short_done_s"])),
                             ("requests/s", lambda r: f(r["short_req_per_s"])),
                             ("output tokens/s", lambda r: f(r["out_tok_per_s"], 0)), tpot,
                             ("mean tick (ms)", lambda r: f(r["mean_tick_ms"]))]),
        "", f"per_group / replicated: **{o[pg]['short_req_per_s'] / o[rep]['short_req_per_s']:.3f}x** requests/s, "
        f"{o[pg]['out_tok_per_s'] / o[rep]['out_tok_per_s']:.3f}x output tokens/s.", "",
        f"## The same batch plus one {LONG_TOKENS:,}-token request spanning all four groups", "",
        *table("design", ol, [("shorts done (s)", lambda r: f(r["short_done_s"])),
                              ("short requests/s", lambda r: f(r["short_req_per_s"])),
                              ("long TTFT (s)", lambda r: f(r["long_ttft_s"])),
                              ("blocks the long request spans", lambda r: str(r["long_blocks"])), tpot]),
        "", f"per_group / replicated: **{ol[pg]['short_req_per_s'] / ol[rep]['short_req_per_s']:.3f}x** short "
        f"requests/s.", "", "## Open loop: 200 QPS of shorts for 60 s (above both designs' capacity)", "",
        *table("design", op, [("completed/s", lambda r: f(r["completed_per_s"])), misses, tpot]),
        "", f"per_group / replicated: **{op[pg]['completed_per_s'] / op[rep]['completed_per_s']:.3f}x** completed/s "
        "(three decimals: a ratio just under 3 must not round up to the target).",
        "", "## SPP = 2: TPOT against a 50 ms target (llama3-8b-a100x16-tp8-spp2, 5% long, 1 QPS, 120 s)", "",
        *table("policy", report["spp2"], [tpot, ("largest gap between two tokens (ms)", lambda r: ms(r["max_gap"])),
                                          misses]),
    ]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shorts", type=int, default=3000, help="shorts in the offline batch (about)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    shorts = [replace(s, arrival=0.0) for s in generate(WorkloadSpec(qps=args.shorts / 60, duration=60,
                                                                     long_fraction=0.0, seed=0))]
    with_long = [RequestSpec(0.0, LONG_TOKENS, 16)] + shorts
    stream = generate(WorkloadSpec(qps=200, duration=60, long_fraction=0.0, seed=0))
    results = {"offline": {}, "offline_long": {}, "open_loop": {}}
    for name, spec in DESIGNS.items():
        exp = Experiment(load_profile(spec))
        results["offline"][name] = offline(exp, shorts)
        if "kvp=4" in name:
            results["offline_long"][name] = offline(exp, with_long)
            results["open_loop"][name] = open_loop(exp, stream, 60.0)
        print(name, "done", flush=True)
    results["spp2"] = spp_rows()
    report = {**results, "num_shorts": len(shorts), **run_info("kvp_groups.py", argv, load_before)}
    write_results(Path(args.out), "kvp_groups", report, render(report))


if __name__ == "__main__":
    main()

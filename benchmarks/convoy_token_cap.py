"""The convoy workload in one process, policy x token cap, interleaved: what the token cap does.

    python benchmarks/convoy_token_cap.py benchmarks/results/convoy_load0.2_whole_tile_chunks.json \
        --configs fcfs_nonchunked:512,slo:512,edf:512,slo:default,edf:default --rounds 3 \
        --profile-dir /tmp/cv/c/profiles

Why: `benchmarks/convoy.py` runs each policy as a gRPC server, ~1 min per run plus start-up, and
keeps only summaries. This replays a convoy run's workload (its arrival times, prompt lengths,
output lengths and TTFT deadlines) against in-process engines, all built before the clock starts,
so several policy x cap configurations can be compared in interleaved rounds, and it keeps every
iteration's composition with its predicted and measured time (`--keep-records`) to see where the
long request's time goes.

Data flow: convoy results JSON (workload, t_target, deadline_min) -> one `LLM("demo", ...)` per
configuration `policy:cap` (cap: max_num_batched_tokens, or `default` for the engine's), with the
convoy's engine shapes and the given runtime profile -> per round, in alternating order, each engine
gets the workload open-loop (requests added at their arrival times, `engine.step()` in between,
random prompts) -> per run: the long request's completion and TTFT, short P99 TTFT, short misses
-> medians, and the long completion over fcfs_nonchunked's in the same round (with --keep-records
also the long request's window: its chunks' predicted time alone and the shorts' share of the
window, `long_window`) ->
results/<name>.json and .md with the machine and load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from convoy import engine_shapes  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def build(config: str, choice: dict, settings: dict, profile_dir: str):
    from medha_jax.llm import LLM
    from medha_jax.sampling_params import SamplingParams

    policy, cap = config.split(":")
    llm = LLM("demo", policy=policy, max_num_batched_tokens=None if cap == "default" else int(cap),
              **engine_shapes(settings), enable_prefix_caching=False, background_compile=False,
              profile_dir=profile_dir, prefill_cache_dir=os.path.join(profile_dir, "prefill_times"),
              batch_mode=False, max_records=1 << 16, t_target=choice["t_target"],
              deadline_min=choice["deadline_min"])
    llm.generate([[7] * 200], SamplingParams(max_tokens=2, temperature=0.0))  # first-call costs
    return llm


def run_workload(llm, work: list[dict], rng: random.Random, keep_records: bool) -> dict:
    """The workload open-loop against one engine: requests join at their arrival times."""
    from medha_jax.sampling_params import SamplingParams

    eng = llm.engine
    prompts = [[rng.randrange(5, 500) for _ in range(w["prompt_len"])] for w in work]
    eng.scheduler.records.clear()
    first: dict[str, float] = {}
    done: dict[str, float] = {}
    t0 = time.perf_counter()
    i = 0
    while len(done) < len(work):
        now = time.perf_counter() - t0
        while i < len(work) and work[i]["arrival_s"] <= now:
            w = work[i]
            eng.add_request(prompts[i], SamplingParams(max_tokens=w["max_tokens"], temperature=0.0, ignore_eos=True),
                            request_id=w["request_id"], ttft_deadline=w["ttft_deadline_s"])
            i += 1
        if not eng.has_unfinished():
            time.sleep(0.001)
            continue
        for out in eng.step():
            t = time.perf_counter() - t0
            if out.request_id not in first and len(out.token_ids) > 0:
                first[out.request_id] = t
            if out.finished:
                done[out.request_id] = t
    shorts = [w for w in work if w["kind"] == "short"]
    short_ttft = [first[w["request_id"]] - w["arrival_s"] for w in shorts]
    missed = [(w["request_id"], w["arrival_s"], t, w["ttft_deadline_s"])
              for w, t in zip(shorts, short_ttft) if t > w["ttft_deadline_s"]]
    ttft = sorted(short_ttft)
    longs = [w for w in work if w["kind"] == "long"]
    res = {"long_done_s": max(done[w["request_id"]] - w["arrival_s"] for w in longs),
           "long_ttft_s": max(first[w["request_id"]] - w["arrival_s"] for w in longs),
           "short_p99_ttft_s": ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))],
           "short_misses": len(missed), "shorts": len(shorts), "iterations": len(eng.scheduler.records),
           "load": os.getloadavg()[0], "missed": missed}
    if keep_records:
        res["records"] = [(r.composition.to_json(), r.predicted, r.measured) for r in eng.scheduler.records]
        res.update(long_window(eng.scheduler.records, eng.scheduler.predictor,
                               max(w["prompt_len"] for w in shorts)))
    return res


def long_window(records, predictor, short_max: int) -> dict:
    """Where the long request's time went, from the iteration records: the iterations from its
    first chunk to its last (the window), their measured seconds, and the predictor's raw seconds
    for the whole iterations and for the long chunks alone. others_share = 1 - long alone / whole
    (predicted): the part of the window the shorts took, so the long request's completion is
    about its chunked time alone / (1 - others_share). A long chunk is a chunk that reaches past
    the longest short prompt (`short_max` tokens), so the long prompt's first few chunks, which a
    short's could be, count as the shorts'."""
    from medha_jax.scheduler.records import Composition

    def long_part(comp):
        return [(q, kv) for q, kv in comp.seqs if q > 1 and q + kv > short_max]

    records = list(records)
    parts = [long_part(r.composition) for r in records]  # the long chunk of each iteration, or []
    idx = [i for i, p in enumerate(parts) if p]
    if not idx or predictor is None:
        return {}
    window = records[idx[0]: idx[-1] + 1]
    whole = sum(predictor.predict_raw(r.composition) for r in window)
    alone = sum(predictor.predict_raw(Composition.of(p)) for p in parts[idx[0]: idx[-1] + 1] if p)
    return {"window_measured_s": sum(r.measured or 0.0 for r in window), "window_predicted_s": whole,
            "long_alone_predicted_s": alone, "others_share": 1.0 - alone / whole if whole > 0 else 0.0,
            "window_iterations": len(window)}


def render(report: dict) -> list[str]:
    runs = report["runs"]
    configs = list(runs)
    base = next((c for c in configs if c.startswith("fcfs_nonchunked")), None)
    shares = any("others_share" in r for rs in runs.values() for r in rs)
    lines = ["| config | long done (median) | vs fcfs_nonchunked, per round | short P99 TTFT (median) "
             "| short misses per round | every round: long done s |"
             + (" long chunks alone (predicted) s / shorts' share of its window, per round |" if shares else ""),
             "|---|---|---|---|---|---|" + ("---|" if shares else "")]
    for c in configs:
        rs = runs[c]
        ratio = ("" if base is None or c == base else
                 ", ".join(f"{r['long_done_s'] / b['long_done_s']:.2f}x" for r, b in zip(rs, runs[base])))
        lines.append(f"| {c} | {statistics.median(r['long_done_s'] for r in rs):.2f} s | {ratio} | "
                     f"{statistics.median(r['short_p99_ttft_s'] for r in rs):.2f} s | "
                     f"{', '.join(str(r['short_misses']) for r in rs)} / {rs[0]['shorts']} | "
                     f"{', '.join(f'{r['long_done_s']:.2f}' for r in rs)} |"
                     + (" " + ", ".join(f"{r['long_alone_predicted_s']:.1f} / {r['others_share']:.2f}"
                                        if "others_share" in r else "-" for r in rs) + " |" if shares else ""))
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("convoy_json", help="a benchmarks/convoy.py results JSON: its workload and choice")
    ap.add_argument("--configs", default="fcfs_nonchunked:512,slo:512,edf:512,slo:default,edf:default",
                    help="policy:cap, cap a max_num_batched_tokens or `default` (the engine's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--profile-dir", required=True, help="runtime profile dir (the convoy run's, to reuse its t_target)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep-records", action="store_true", help="every iteration's composition, predicted, measured")
    ap.add_argument("--name", default="convoy_token_cap")
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    src = json.loads(Path(args.convoy_json).read_text())
    work = sorted(src["workload"], key=lambda w: w["arrival_s"])
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in configs:
        if c.count(":") != 1:
            raise SystemExit(f"config {c!r}: expected policy:cap")
    load_before = os.getloadavg()
    engines = {c: build(c, src["choice"], src["settings"], args.profile_dir) for c in configs}
    rng = random.Random(args.seed)
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    for r in range(args.rounds):
        for c in configs if r % 2 == 0 else configs[::-1]:
            res = run_workload(engines[c], work, rng, args.keep_records)
            runs[c].append(res)
            print(f"round {r} {c}: long done {res['long_done_s']:.2f} s, short P99 {res['short_p99_ttft_s']:.3f} s, "
                  f"misses {res['short_misses']}", flush=True)
    for llm in engines.values():
        llm.close()
    report = {"source": args.convoy_json, "choice": src["choice"], "configs": configs, "rounds": args.rounds,
              "runs": runs, **run_info("convoy_token_cap.py", argv, load_before)}
    ch = src["choice"]
    shorts = [w["arrival_s"] for w in work if w["kind"] == "short"]
    longs = ", ".join(f"{w['prompt_len']} tokens at t={w['arrival_s']:g} s" for w in work if w["kind"] == "long")
    lines = ["# The convoy workload in one process: policy x token cap", "", provenance(report), "",
             f"Workload of `{args.convoy_json}`: {len(shorts)} shorts over {max(shorts, default=0.0):.0f} s, "
             f"long prompts: {longs}; t_target {ch['t_target']:g} s, deadline_min {ch['deadline_min']:g} s; "
             f"{args.rounds} rounds, configurations interleaved (order reversed every other round).", ""]
    write_results(Path(args.out), args.name, report, lines + render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a CPU engine step's time goes: the offline job's prefill iteration and decode steps, op by
op, each op charged to the source function that emitted it.

    python benchmarks/step_profile_cpu.py            # results/step_profile_cpu.{json,md}
    python benchmarks/step_profile_cpu.py --small    # seconds: a code-path check
    python benchmarks/step_profile_cpu.py --set layer_unroll=8 --name step_profile_cpu_unroll8   # a setting changed

Data flow:
  XLA_FLAGS += --xla_cpu_enable_xprof_traceme=true (XLA:CPU then emits a trace event per op)
  -> LLM(model=dir, load_format="dummy", dtype="float32"), every other setting its default, on the
     random LLAMA_31M (8 layers, hidden 512, GQA 8:2, vocab 8192) -> one untimed pass of the offline
     job (16 prompts x 512 tokens + 64 new, greedy; compiles), background compiles awaited
  -> one pass under `jax.profiler.trace(create_perfetto_trace=True)`; the executor's `runnable`
     is wrapped to note which compiled bucket each tick ran
  -> trace events of the engine step (hlo_module jit_step), grouped by execution (run_id), in
     launch order; execution i is tick i and the scheduler's i-th iteration record of the pass
     (prefill iteration: a sequence with more than one query token; else a decode step)
  -> each event's self time (its duration less its nested events': a while loop's own time is
     the loop's bookkeeping, its body's ops are charged to themselves)
  -> each op's source: the innermost stack frame of its HLO metadata in that bucket's executable
     (`compiled.as_text()`: FileNames / FunctionNames / FileLocations / StackFrames tables)
  -> per step kind: mean time per step by source file and by source function, and the top ops.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

if "xla_cpu_enable_xprof_traceme" not in os.environ.get("XLA_FLAGS", ""):  # before jax starts its backend
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_xprof_traceme=true").strip()

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dummy_models import LLAMA_31M, TINY, batch_prompts, write_model_dir  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
ROOT = str(Path(__file__).resolve().parent.parent) + "/"
EXECUTOR_OVERHEAD = "(XLA thunk executor)"


def op_sources(hlo_text: str) -> dict[str, tuple[str, str, int]]:
    """HLO op name -> (file, function, line) of the innermost stack frame in its metadata."""
    tables: dict[str, dict[int, str]] = {"FileNames": {}, "FunctionNames": {}, "FileLocations": {}, "StackFrames": {}}
    section = None
    for line in hlo_text.splitlines():  # a table: its name, then "id value" lines up to a blank line
        if line in tables:
            section = line
        elif not line.strip():
            section = None
        elif section and line[0].isdigit():
            k, v = line.split(" ", 1)
            tables[section][int(k)] = v
    files = {k: v.strip('"').replace(ROOT, "") for k, v in tables["FileNames"].items()}
    funcs = {k: v.strip('"') for k, v in tables["FunctionNames"].items()}

    def field(text, name):
        return int(re.search(rf"\b{name}=(\d+)", text).group(1))

    frames = {}
    for k, v in tables["StackFrames"].items():
        loc = tables["FileLocations"][field(v, "file_location_id")]
        frames[k] = (files[field(loc, "file_name_id")], funcs[field(loc, "function_name_id")], field(loc, "line"))
    out = {}
    for m in re.finditer(r"^\s*(?:ROOT )?%(\S+) = .*?stack_frame_id=(\d+)", hlo_text, re.M):
        out[m.group(1)] = frames.get(int(m.group(2)), ("?", "?", 0))
    return out


def self_times(events: list[dict]) -> list[tuple[dict, float]]:
    """(event, its duration less its nested events') for complete events on one thread."""
    out, stack = [], []  # stack: [event, end, child time]
    for e in sorted(events, key=lambda e: (e["ts"], -e["dur"])):
        while stack and e["ts"] >= stack[-1][1]:
            done = stack.pop()
            out.append((done[0], done[0]["dur"] - done[2]))
        if stack:
            stack[-1][2] += e["dur"]
        stack.append([e, e["ts"] + e["dur"], 0.0])
    out += [(s[0], s[0]["dur"] - s[2]) for s in stack]
    return out


def step_runs(trace_events: list[dict]) -> list[dict]:
    """The engine step's executions in launch order: {wall_us, ops: [(hlo_op or None, self_us)]}.

    A run's events are those tagged with its run_id (hlo_module jit_step) and the thunk executor
    events on the same threads that overlap them (the executor's own time is their self time; the
    outermost one spans the whole execution)."""
    xs = [e for e in trace_events if e.get("ph") == "X" and "dur" in e]
    runs: dict[str, list[dict]] = defaultdict(list)
    for e in xs:
        a = e.get("args", {})
        if a.get("hlo_module") == "jit_step" and "run_id" in a and "hlo_op" in a:
            runs[a["run_id"]].append(e)
    executor = defaultdict(list)  # tid -> thunk executor events (no hlo_op)
    for e in xs:
        if e["name"] == "ThunkExecutor::Execute":
            executor[e["tid"]].append(e)
    out = []
    for rid, ops in runs.items():
        t0, t1 = min(e["ts"] for e in ops), max(e["ts"] + e["dur"] for e in ops)
        tids = {e["tid"] for e in ops}
        spans = [e for t in tids for e in executor[t] if e["ts"] < t1 and e["ts"] + e["dur"] > t0]  # overlapping
        t0 = min([t0] + [e["ts"] for e in spans])
        t1 = max([t1] + [e["ts"] + e["dur"] for e in spans])
        by_tid = defaultdict(list)
        for e in ops + spans:
            by_tid[e["tid"]].append(e)
        charged = []
        for evs in by_tid.values():
            for e, s in self_times(evs):
                charged.append((e.get("args", {}).get("hlo_op"), s))
        out.append(dict(t0=t0, wall_us=t1 - t0, ops=charged))
    return sorted(out, key=lambda r: r["t0"])


def summarize(runs: list[dict], kinds: list[str], buckets: list, sources: dict) -> dict:
    """Per step kind: steps, mean wall ms, mean ms per step by file, by function, top ops."""
    res = {}
    for kind in ("prefill", "decode"):
        idx = [i for i, k in enumerate(kinds) if k == kind]
        if not idx:
            continue
        n = len(idx)
        by_file, by_func, by_op = defaultdict(float), defaultdict(float), defaultdict(float)
        for i in idx:
            src = sources[buckets[i]]
            for op, us in runs[i]["ops"]:
                f, fn, line = src.get(op, ("?", "?", 0)) if op else (EXECUTOR_OVERHEAD, EXECUTOR_OVERHEAD, 0)
                by_file[f] += us / 1e3 / n
                by_func[f"{f}:{fn}"] += us / 1e3 / n
                by_op[f"{op} ({f}:{line} {fn})" if op else EXECUTOR_OVERHEAD] += us / 1e3 / n
        top = lambda d, k: sorted(d.items(), key=lambda kv: -kv[1])[:k]  # noqa: E731
        res[kind] = dict(steps=n, wall_ms=statistics.mean(runs[i]["wall_us"] / 1e3 for i in idx),
                         charged_ms=sum(by_file.values()),
                         wall_ms_median=statistics.median(runs[i]["wall_us"] / 1e3 for i in idx),
                         by_file=top(by_file, 12), by_function=top(by_func, 15), top_ops=top(by_op, 15))
    return res


def _parse_setting(kv: str) -> tuple[str, object]:
    """'layer_unroll=8' -> ('layer_unroll', 8): ints and floats parsed, anything else a string."""
    key, sep, value = kv.partition("=")
    if not sep or not key:
        raise SystemExit(f"--set wants KEY=VALUE, got {kv!r}")
    for kind in (int, float):
        try:
            return key, kind(value)
        except ValueError:
            pass
    return key, value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="tiny model and job: a code-path check")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_step_profile"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an LLM setting over the defaults (int, float or string), e.g. layer_unroll=8; repeatable")
    args = ap.parse_args(argv)
    import jax

    from medha_jax import LLM, SamplingParams

    prompts, prompt_len, new = (4, 48, 8) if args.small else (16, 512, 64)
    cfg = TINY if args.small else LLAMA_31M
    model_dir = write_model_dir(args.workdir, "tiny" if args.small else "llama-31m", cfg)
    settings = dict(load_format="dummy", dtype="float32", profile_dir=str(args.workdir / "profiles"),
                    compilation_cache_dir=str(args.workdir / "xla"))
    settings.update(_parse_setting(kv) for kv in args.set)
    llm = LLM(model=str(model_dir), **settings)
    sp = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    job = lambda r: batch_prompts(prompts, prompt_len, cfg["vocab_size"], r)  # noqa: E731
    load_before = os.getloadavg()
    llm.generate(job(0), sp)
    ex = llm.engine.executor
    ex.wait_compiled(1800)
    ran = []
    runnable = ex.runnable
    ex.runnable = lambda b: ran.append(runnable(b)) or ran[-1]  # notes each tick's bucket, same choice
    with tempfile.TemporaryDirectory() as d:
        n_rec = len(llm.engine.scheduler.records)
        t0 = time.perf_counter()
        with jax.profiler.trace(d, create_perfetto_trace=True):
            llm.generate(job(1), sp)
        pass_s = time.perf_counter() - t0
        recs = list(llm.engine.scheduler.records)[-(len(llm.engine.scheduler.records) - n_rec):]
        path = next(Path(d).rglob("*.trace.json.gz"))
        trace = json.load(gzip.open(path))
    ex.runnable = runnable
    runs = step_runs(trace["traceEvents"] if isinstance(trace, dict) else trace)
    if not (len(runs) == len(ran) == len(recs)):
        raise SystemExit(f"{len(runs)} traced executions, {len(ran)} ticks, {len(recs)} records: cannot match them")
    kinds = ["prefill" if any(q > 1 for q, _ in r.composition.seqs) else "decode" for r in recs]
    sources = {b: op_sources(ex._compiled[b].as_text()) for b in set(ran)}
    summary = summarize(runs, kinds, ran, sources)
    report = dict(run_info("step_profile_cpu.py", argv, load_before), device=jax.devices()[0].device_kind,
                  job=dict(prompts=prompts, prompt_len=prompt_len, new_tokens=new, model=cfg, settings=settings),
                  traced_pass_s=pass_s, buckets=sorted({str(b) for b in ran}), steps=summary)
    lines = [f"# Where the CPU engine step's time goes ({time.strftime('%Y-%m-%d')})", "",
             f"{provenance(report)} Job: {prompts} prompts x {prompt_len} tokens + {new} new, greedy, "
             f"random Llama ({cfg['num_hidden_layers']} layers, hidden {cfg['hidden_size']}), float32, `LLM` "
             f"defaults{''.join(f', {kv}' for kv in args.set)}. One pass traced ({pass_s:.2f} s under the "
             "tracer); each op's self time charged to the "
             "source function its HLO metadata names (a fusion: its root op's), means per step. Times are "
             "thread time: XLA runs some fusions on both cores at once, so a step's charged time can pass its "
             "wall time; `?`: ops without source metadata.", ""]
    for kind, s in summary.items():
        lines += [f"## {kind}: {s['steps']} step(s), {s['wall_ms']:.1f} ms mean, {s['wall_ms_median']:.1f} ms median "
                  f"(thread time charged: {s['charged_ms']:.1f} ms a step)",
                  "", "| source file | ms per step | share of the charged time |", "|---|---|---|"]
        lines += [f"| {f} | {ms:.2f} | {ms / s['charged_ms']:.0%} |" for f, ms in s["by_file"]]
        lines += ["", "| source function | ms per step |", "|---|---|"]
        lines += [f"| {f} | {ms:.2f} |" for f, ms in s["by_function"]]
        lines += ["", "| op (source) | ms per step |", "|---|---|"]
        lines += [f"| {op} | {ms:.2f} |" for op, ms in s["top_ops"]]
        lines.append("")
    write_results(args.out, args.name or ("step_profile_cpu_small" if args.small else "step_profile_cpu"),
                  report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a decode tick's time goes on a GPU: the device's kernels, streams and copies, over the
decode ticks alone, with the layer loop as a scan and unrolled.

    python benchmarks/decode_profile_gpu.py            # on a GPU (~2-3 min)
    python benchmarks/decode_profile_gpu.py --model llama-31m   # vs_hf.py's model, its 16 x 512 batch
    python benchmarks/decode_profile_gpu.py --small    # CPU dry run of the code paths

Why: on the H200 (benchmarks/results/h200/) a Llama-3-8B-shaped model decoded one sequence at 8K
tokens of context in 19.6 ms a token, 3.7x the time to read its 16 GB of weights once. The
first profile (run5_vs_hf_profile) summed the whole run, prefill ticks included, and its largest
item was 8.9 ms a tick of device-to-device copies on five streams; the lead is the layer scan's
slices of the stacked [L, ...] weights, which XLA:GPU copies out where a matmul library call
cannot read a slice in place. This run answers it: only decode ticks are traced, every copy is
listed with its size, stream and the HLO op that issued it, and the same requests run with the
layer loop unrolled (`layer_unroll`), where the weights are static slices.

Data flow, per variant in (scan: layer_unroll=1, unrolled: layer_unroll=L), one LLM each
(Llama-3-8B config from benchmarks/dummy_models, or with --model llama-31m the model of vs_hf.py,
where medha-jax's ticks took ~7 ms on the H200 against HF's ~5 ms steps; load_format="dummy",
bfloat16, fcfs, Pallas attention, a 30 GB KV cache (31M: 4 GB); --small: the tiny model, 1,024 pages):
  -> an untimed pass of every batch below (compiles their buckets; its TPOT, no profiler, is the
     row's TPOT)
  -> per batch in (1 x PROMPT, 32 x 1,024 tokens; 31M: 1 x PROMPT, 16 x 512; --small: 1 x 256,
     4 x 64), NEW greedy tokens:
     add the requests, step until each has 2 tokens (prefills done), then jax.profiler.trace
     while the engine steps to the end -> the trace's device planes: busy time per stream line,
     their union, time per kernel name and per issuing HLO op, copies by size and op
  -> per tick = divided by the decode ticks inside the trace (tokens of the first request)
-> <out>/decode_profile_<device>.json and .md
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from medha_jax import LLM, SamplingParams  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dummy_models import LLAMA3_8B, LLAMA_31M, TINY, batch_prompts, write_model_dir  # noqa: E402
from results_io import device_slug  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TOP = 20


def _stats(ev) -> dict:
    try:
        return {k: v for k, v in ev.stats}
    except Exception:  # noqa: BLE001 - a profiler build without event stats
        return {}


def _copy_bytes(stats: dict) -> int | None:
    for key in ("memcpy_details", "bytes_transferred", "num_bytes", "size"):
        v = stats.get(key)
        if isinstance(v, (int, float)):
            return int(v)
        m = re.search(r"(?:num_bytes|size|bytes)[:=]\s*(\d+)", str(v or ""))
        if m:
            return int(m.group(1))
    return None


SIZE_BINS = ((4 << 10, "< 4 KB"), (1 << 20, "4 KB - 1 MB"), (64 << 20, "1 - 64 MB"), (1 << 62, ">= 64 MB"))


def device_time(trace_dir: str) -> dict:
    """The trace's device planes: busy ns per stream line and their union, and per kernel name,
    per issuing HLO op and per copy size bin [total_ns, count(, bytes)]."""
    from jax.profiler import ProfileData
    files = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
    return summarize(ProfileData.from_file(files[0]) if files else None)


def summarize(profile) -> dict:
    """device_time of a `jax.profiler.ProfileData` (None: nothing traced)."""
    out = {"lines": {}, "union_ns": 0, "span_ns": 0, "kernels": collections.defaultdict(lambda: [0, 0]),
           "hlo_ops": collections.defaultdict(lambda: [0, 0]), "copies": collections.defaultdict(lambda: [0, 0, 0]),
           "copy_ops": collections.defaultdict(lambda: [0, 0, 0]), "copy_stats_sample": []}
    if profile is None:
        return out
    spans = []
    for plane in profile.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            if not line.name.startswith("Stream"):
                continue
            busy = 0
            for ev in line.events:
                dur = ev.duration_ns
                busy += dur
                spans.append((ev.start_ns, ev.start_ns + dur))
                name = re.sub(r"[._]\d+$", "", ev.name)  # fusion.12 -> fusion
                out["kernels"][name][0] += dur
                out["kernels"][name][1] += 1
                st = _stats(ev)
                op = str(st.get("hlo_op", "?"))
                out["hlo_ops"][op][0] += dur
                out["hlo_ops"][op][1] += 1
                if name.startswith("Memcpy"):
                    nbytes = _copy_bytes(st)
                    label = f"{name}, " + (next(lab for lim, lab in SIZE_BINS if nbytes < lim) if nbytes is not None
                                          else "size unknown")
                    for table, key in ((out["copies"], label), (out["copy_ops"], f"{name} {op}")):
                        table[key][0] += dur
                        table[key][1] += 1
                        table[key][2] += nbytes or 0
                    if len(out["copy_stats_sample"]) < 5:
                        out["copy_stats_sample"].append({k: str(v)[:200] for k, v in st.items()})
            out["lines"][f"{plane.name}: {line.name}"] = busy
    if spans:
        spans.sort()
        union, (lo, hi) = 0, spans[0]
        for s0, s1 in spans[1:]:
            if s0 > hi:
                union, lo, hi = union + hi - lo, s0, s1
            else:
                hi = max(hi, s1)
        out["union_ns"] = union + hi - lo
        out["span_ns"] = hi - spans[0][0]  # the merged runs are disjoint and in order: the last ends last
    return out


def top_rows(table: dict, ticks: int, n: int = TOP) -> list[dict]:
    rows = sorted(table.items(), key=lambda kv: -kv[1][0])[:n]
    return [dict(name=k, ms_per_tick=v[0] / 1e6 / ticks, calls_per_tick=v[1] / ticks,
                 **({"mb_per_tick": v[2] / 1e6 / ticks} if len(v) > 2 else {})) for k, v in rows]


def traced_decode(llm, prompts: list[list[int]], sp: SamplingParams, trace_dir: str) -> tuple[int, float]:
    """Prefill `prompts`, then trace the engine to the end: (decode ticks traced, wall seconds)."""
    eng = llm.engine
    reqs = [eng.add_request(p, sp) for p in prompts]
    while any(len(r.output_token_ids) < 2 for r in reqs):
        eng.step()
    with jax.profiler.trace(trace_dir):
        n0, t0 = len(reqs[0].output_token_ids), time.perf_counter()
        while eng.has_unfinished():
            eng.step()
        wall = time.perf_counter() - t0
    return len(reqs[0].output_token_ids) - n0, wall


def measure(model_dir: Path, layers: int, unroll: int, kv: dict, batches, new: int, log):
    """Yields one row per batch, so a run cut off mid-variant keeps the rows it finished."""
    t0 = time.perf_counter()
    llm = LLM(model=str(model_dir), load_format="dummy", dtype="bfloat16", scheduler="fcfs", mesh="tp=1",
              num_devices=1, attention_backend="pallas", max_model_len=max(4096, 2 * max(p for _, p in batches)),
              page_size=16, max_num_batched_tokens=2048, max_num_seqs=max(4, max(n for n, _ in batches)),
              warmup=False, layer_unroll=unroll, **kv)
    ex = llm.engine.executor
    greedy = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    vocab = llm.engine.model_config.vocab_size
    for count, prompt in batches:
        untimed = llm.generate(batch_prompts(count, prompt, vocab, 0), greedy)  # compiles; its TPOT
        tpot = statistics.median(o.metrics.tpot for o in untimed)
        compile_s = time.perf_counter() - t0
        trace_dir = tempfile.mkdtemp()
        ticks, wall = traced_decode(llm, batch_prompts(count, prompt, vocab, 1), greedy, trace_dir)
        ticks = max(1, ticks)
        dev = device_time(trace_dir)
        row = dict(layer_loop="scan" if unroll == 1 else f"unrolled ({unroll} of {layers})", requests=count,
                   prompt=prompt, kv_cache_bytes=2 * ex.kv_k.nbytes, num_pages=ex.total_pages, tpot_ms=1e3 * tpot,
                   traced_ms_per_tick=1e3 * wall / ticks, ticks=ticks, seconds_to_first_batch=compile_s,
                   weights_bytes=sum(a.nbytes for a in jax.tree.leaves(ex.params)),
                   device_union_ms_per_tick=dev["union_ns"] / 1e6 / ticks,
                   device_span_ms_per_tick=dev["span_ns"] / 1e6 / ticks,
                   streams={k: v / 1e6 / ticks for k, v in dev["lines"].items()},
                   kernels=top_rows(dev["kernels"], ticks), hlo_ops=top_rows(dev["hlo_ops"], ticks),
                   copies=top_rows(dev["copies"], ticks), copy_ops=top_rows(dev["copy_ops"], ticks),
                   copy_stats_sample=dev["copy_stats_sample"])
        log(f"{row['layer_loop']}, {count} x {prompt}: tpot {row['tpot_ms']:.2f} ms (traced {row['traced_ms_per_tick']:.2f}),"
            f" device busy (union of streams) {row['device_union_ms_per_tick']:.2f} ms/tick over {ticks} ticks;"
            f" {compile_s:.0f} s to this batch")
        for k in row["kernels"][:6] + row["copies"]:
            log(f"    {k['ms_per_tick']:8.3f} ms/tick  {k['calls_per_tick']:7.1f} calls  {k['name'][:90]}")
        yield row
    llm.close()


def _table(title: str, rows: list[dict]) -> list[str]:
    mb = rows and "mb_per_tick" in rows[0]
    out = ["", f"### {title}", "", "| ms | calls |" + (" MB |" if mb else "") + " name |", "|---|---|" + ("---|" if mb else "") + "---|"]
    return out + [f"| {k['ms_per_tick']:.3f} | {k['calls_per_tick']:.1f} |" + (f" {k['mb_per_tick']:.1f} |" if mb else "")
                  + f" `{k['name'][:120]}` |" for k in rows]


def write_report(report, out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = device_slug(report["device"])
    stem = f"decode_profile_{slug}" + ("_31m" if report["model"] == "llama-31m" else "")
    stem += f"_{report['tag']}" if report.get("tag") else ""
    jpath, mpath = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    jpath.write_text(json.dumps(report, indent=1, default=str))
    lines = [f"# Decode ticks on {report['device']}", "",
             f"jax {report['jax']}, {report['elapsed_s']:.0f} s; model {report['model']}, {report['new']} greedy tokens a "
             "request; Pallas attention; only decode ticks traced. TPOT: the untraced pass; per tick: over the traced "
             "decode ticks." + (f" XLA_FLAGS: `{report['xla_flags']}`." if report.get("xla_flags") else ""), "",
             "| layer loop | requests x prompt | KV cache | TPOT ms | traced ms/tick | device busy ms/tick (union of streams) "
             "| s to this batch (compiles) | weights |", "|---|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['layer_loop']} | {r['requests']} x {r['prompt']} | {r['kv_cache_bytes'] / 1e9:.2f} GB | "
                     f"{r['tpot_ms']:.2f} | {r['traced_ms_per_tick']:.2f} | {r['device_union_ms_per_tick']:.2f} | "
                     f"{r['seconds_to_first_batch']:.0f} | {r['weights_bytes'] / 1e9:.2f} GB |")
    for r in report["rows"]:
        head = f"{r['layer_loop']}, {r['requests']} x {r['prompt']} (per decode tick)"
        lines += ["", f"## {head}", "", "| stream | busy ms |", "|---|---|"]
        lines += [f"| {k} | {v:.3f} |" for k, v in sorted(r["streams"].items(), key=lambda kv: -kv[1])]
        lines += _table("kernels", r["kernels"]) + _table("by issuing HLO op", r["hlo_ops"])
        lines += _table("copies by size", r["copies"]) + _table("copies by issuing HLO op", r["copy_ops"])
    mpath.write_text("\n".join(lines) + "\n")
    return jpath, mpath


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="tiny model on the CPU: a dry run of the code paths")
    ap.add_argument("--model", choices=("llama3-8b", "llama-31m"), default="llama3-8b")
    ap.add_argument("--prompt", type=int, default=8192, help="the one-request row's prompt")
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--loops", default="scan,unrolled",
                    help="layer loops to run, in order: scan (layer_unroll=1) and/or unrolled (every layer)")
    ap.add_argument("--tag", default="", help="appended to the results' file names (e.g. the XLA flags' variant)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if jax.default_backend() != "gpu" and not args.small:
        print("decode_profile_gpu.py: no GPU found; use --small for a CPU dry run", file=sys.stderr)
        return 2
    start = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - start:6.1f}s] {msg}", flush=True)  # noqa: E731
    small_model = args.model == "llama-31m"
    cfg = TINY if args.small else LLAMA_31M if small_model else LLAMA3_8B
    batches = ([(1, min(args.prompt, 256)), (4, 64)] if args.small else
               [(1, args.prompt), (16, 512) if small_model else (32, 1024)])
    kv = dict(num_pages=1024) if args.small else dict(kv_cache_memory_gb=4.0 if small_model else 30.0)
    layers = cfg["num_hidden_layers"]
    loops = {"scan": 1, "unrolled": layers}
    bad = [name for name in args.loops.split(",") if name not in loops]
    if bad:
        ap.error(f"--loops: unknown layer loop(s) {bad}; choose from {sorted(loops)}")
    report = dict(device=jax.devices()[0].device_kind, jax=jax.__version__, new=args.new,
                  model="tiny" if args.small else args.model, tag=args.tag, xla_flags=os.environ.get("XLA_FLAGS", ""), rows=[])
    with tempfile.TemporaryDirectory() as tmp:
        d = write_model_dir(Path(tmp), "decode-profile", cfg)
        for name in args.loops.split(","):
            for row in measure(d, layers, loops[name], kv, batches, args.new, log):
                report["rows"].append(row)
                report["elapsed_s"] = time.perf_counter() - start
                write_report(report, args.out)  # after each row: a cut-off run keeps what it measured
    jpath, mpath = write_report(report, args.out)
    log(f"wrote {jpath} and {mpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Where a decode tick's time goes on a GPU: the device's kernels and ops, at two KV-cache sizes
and with either attention backend.

    python benchmarks/decode_profile_gpu.py            # on a GPU (~2 min)
    python benchmarks/decode_profile_gpu.py --small    # CPU dry run of the code paths

Why: on the first H200 run (benchmarks/results/h200/) a Llama-3-8B-shaped model decoded one
sequence at 8K tokens of context in 19.8 ms a token, ~4x the time to read its 16 GB of weights
once. If the step touched the whole KV cache (30 GB there), the time would follow the cache's
size, not the batch; if the attention kernels are the cost (that run used the fused POD kernel
on every batch, decode-only ones too, which took 1.8-3.1x the decode kernel's time on decodes in
kernels_gpu.py; the engine now runs the prefill and decode kernels in turn), the XLA attention
path would be faster. This measures the three side by side and names the kernels that take
the time.

Data flow, per (attention, KV-cache size) in (pallas, 4 GB), (pallas, 30 GB), (xla, 30 GB)
(--small: 512 / 8192 pages of a tiny model):
  config.json of Llama-3-8B (benchmarks/dummy_models) -> LLM(load_format="dummy", bfloat16,
  fcfs, that attention backend)
  -> one untimed request (compiles its buckets) -> the same shapes again under
     jax.profiler.trace: one request, PROMPT tokens + NEW greedy tokens
  -> TPOT (the engine's metrics); the decode bucket's XLA cost analysis (bytes accessed) and
     memory analysis; the trace's device planes -> time per kernel name and per XLA op, summed
     over the run and divided by the decode ticks (the prefill ticks are a small share)
-> <out>/decode_profile_<device>.json and .md
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import re
import sys
import tempfile
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from medha_jax import LLM, SamplingParams  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dummy_models import LLAMA3_8B, TINY, batch_prompts, write_model_dir  # noqa: E402
from results_io import device_slug  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TOP = 20


def device_time(trace_dir: str) -> dict:
    """Sum the device planes' events of the trace: {line kind: {name: [total_ns, count]}}."""
    from jax.profiler import ProfileData
    files = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
    out = {"lines": [], "kernels": collections.defaultdict(lambda: [0.0, 0]),
           "ops": collections.defaultdict(lambda: [0.0, 0])}
    if not files:
        return out
    for plane in ProfileData.from_file(files[0]).planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            out["lines"].append(f"{plane.name}: {line.name}")
            if line.name.startswith("Stream"):
                table = out["kernels"]
            elif line.name == "XLA Ops":
                table = out["ops"]
            else:
                continue
            for ev in line.events:
                name = re.sub(r"[._]\d+$", "", ev.name)  # fusion.12 -> fusion
                table[name][0] += ev.duration_ns
                table[name][1] += 1
    return out


def top_rows(table: dict, ticks: int) -> list[dict]:
    rows = sorted(table.items(), key=lambda kv: -kv[1][0])[:TOP]
    return [dict(name=n, ms_per_tick=ns / 1e6 / ticks, calls_per_tick=c / ticks) for n, (ns, c) in rows]


def measure(model_dir: Path, backend: str, kv: dict, prompt: int, new: int, log) -> dict:
    llm = LLM(model=str(model_dir), load_format="dummy", dtype="bfloat16", scheduler="fcfs", mesh="tp=1",
              num_devices=1, attention_backend=backend, max_model_len=max(4096, 2 * prompt), page_size=16,
              max_num_batched_tokens=2048, max_num_seqs=8, warmup=False, **kv)
    ex = llm.engine.executor
    greedy = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    ids = lambda pass_no: batch_prompts(1, prompt, llm.engine.model_config.vocab_size, pass_no)  # noqa: E731
    llm.generate(ids(0), greedy)  # compiles every bucket the timed run uses
    trace_dir = tempfile.mkdtemp()
    with jax.profiler.trace(trace_dir):
        t0 = time.perf_counter()
        out = llm.generate(ids(1), greedy)[0]
        wall = time.perf_counter() - t0
    decode_bucket = ex.ladders.pick(1, 1, -(-(prompt + new) // ex.page_size))
    exe = ex.compile_bucket(decode_bucket)
    cost = exe.cost_analysis()
    cost = (cost[0] if isinstance(cost, list) else cost) or {}
    mem = exe.memory_analysis()
    dev = device_time(trace_dir)
    ticks = max(1, new)
    row = dict(attention=ex.attention_backend, kv_cache_bytes=2 * ex.kv_k.nbytes, num_pages=ex.total_pages, tpot_ms=1e3 * out.metrics.tpot,
               ttft_ms=1e3 * out.metrics.ttft, wall_s=wall, decode_bucket=str(decode_bucket),
               bytes_accessed=cost.get("bytes accessed"), flops=cost.get("flops"),
               temp_bytes=getattr(mem, "temp_size_in_bytes", None),
               weights_bytes=sum(a.nbytes for a in jax.tree.leaves(ex.params)),
               device_ms_per_tick=sum(ns for ns, _ in dev["kernels"].values()) / 1e6 / ticks,
               kernels=top_rows(dev["kernels"], ticks), ops=top_rows(dev["ops"], ticks), trace_lines=dev["lines"])
    log(f"{row['attention']}, kv {row['kv_cache_bytes'] / 1e9:.2f} GB: tpot {row['tpot_ms']:.2f} ms, device busy "
        f"{row['device_ms_per_tick']:.2f} ms/tick, XLA bytes accessed "
        f"{(row['bytes_accessed'] or 0) / 1e9:.2f} GB (weights {row['weights_bytes'] / 1e9:.2f} GB)")
    for k in row["kernels"][:8]:
        log(f"    {k['ms_per_tick']:8.3f} ms/tick  {k['calls_per_tick']:6.1f} calls  {k['name'][:90]}")
    llm.close()
    return row


def write_report(report, out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = device_slug(report["device"])
    jpath, mpath = out_dir / f"decode_profile_{slug}.json", out_dir / f"decode_profile_{slug}.md"
    jpath.write_text(json.dumps(report, indent=1, default=str))
    lines = [f"# A decode tick on {report['device']}", "",
             f"jax {report['jax']}, {report['elapsed_s']:.0f} s; one request, {report['prompt']} prompt tokens + "
             f"{report['new']} greedy tokens; model {report['model']}.", "",
             "| attention | KV cache | pages | TPOT ms | device busy ms/tick | XLA bytes accessed (decode bucket) | weights |",
             "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        ba = f"{r['bytes_accessed'] / 1e9:.2f} GB" if r["bytes_accessed"] else "-"
        lines.append(f"| {r['attention']} | {r['kv_cache_bytes'] / 1e9:.2f} GB | {r['num_pages']} | {r['tpot_ms']:.2f} | "
                     f"{r['device_ms_per_tick']:.2f} | {ba} | {r['weights_bytes'] / 1e9:.2f} GB |")
    for r in report["rows"]:
        for what in ("kernels", "ops"):
            if r[what]:
                lines += ["", f"## {what}, {r['attention']} attention, KV cache {r['kv_cache_bytes'] / 1e9:.2f} GB "
                          "(per decode tick)", "",
                          "| ms | calls | name |", "|---|---|---|"]
                lines += [f"| {k['ms_per_tick']:.3f} | {k['calls_per_tick']:.1f} | `{k['name'][:120]}` |"
                          for k in r[what]]
    mpath.write_text("\n".join(lines) + "\n")
    return jpath, mpath


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="tiny model on the CPU: a dry run of the code paths")
    ap.add_argument("--prompt", type=int, default=8192)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    if jax.default_backend() != "gpu" and not args.small:
        print("decode_profile_gpu.py: no GPU found; use --small for a CPU dry run", file=sys.stderr)
        return 2
    start = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - start:6.1f}s] {msg}", flush=True)  # noqa: E731
    cfg = TINY if args.small else LLAMA3_8B
    prompt = min(args.prompt, 256) if args.small else args.prompt
    small_kv, big_kv = (dict(num_pages=512), dict(num_pages=8192)) if args.small else \
        (dict(kv_cache_memory_gb=4.0), dict(kv_cache_memory_gb=30.0))
    runs = [("pallas", small_kv), ("pallas", big_kv), ("xla", big_kv)]
    report = dict(device=jax.devices()[0].device_kind, jax=jax.__version__, prompt=prompt, new=args.new,
                  model="tiny" if args.small else "llama3-8b shape", rows=[])
    with tempfile.TemporaryDirectory() as tmp:
        d = write_model_dir(Path(tmp), "decode-profile", cfg)
        for backend, kv in runs:
            report["rows"].append(measure(d, backend, kv, prompt, args.new, log))
    report["elapsed_s"] = time.perf_counter() - start
    jpath, mpath = write_report(report, args.out)
    log(f"wrote {jpath} and {mpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

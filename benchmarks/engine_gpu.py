"""The whole engine on a GPU: greedy tokens vs Hugging Face, then a Llama-3-8B-shaped model's speed.

    python benchmarks/engine_gpu.py --hf                 # exactness on the committed checkpoints
    python benchmarks/engine_gpu.py --llama8b            # random-weight Llama-3-8B shape, bf16
    python benchmarks/engine_gpu.py --hf --llama8b --small   # CPU dry run of every code path

Data flow:
  hf       tests/data/<variant> (HF checkpoints and the greedy tokens transformers produced,
           tools/make_golden.py) -> LLM(model=dir, attention_backend=xla | pallas, float32 with
           exact f32 matmuls) -> greedy tokens of every golden prompt (1..3000 tokens, one
           generate call: chunked prefills and decodes share iterations) == golden, per backend;
  llama8b  config.json of Llama-3-8B + a byte-level tokenizer padded to its 128,256-token vocab,
           written to a temp dir -> LLM(load_format="dummy", bfloat16, scheduler="fcfs",
           attention_backend="auto": the Pallas kernels on a GPU) -> phases:
             tpot     32 concurrent streams (1K-token prompts, 256 new tokens): TPOT p50 / p90
             offline  64 prompts x (1,024 in, 256 out) through one LLM.generate: tokens/s
             ttft     one request at a time, 8K / 32K / 128K prompt tokens, 8 new tokens
           (tpot and offline also record every tick's launch and end, `DeviceTimeline`: the
           fraction of the phase the device sat idle waiting for the host between ticks)
           Timings are the engine's own per-request metrics (arrival -> first token, token
           times). Before each timed phase its shape buckets are compiled (single-request
           phases: the exact chunk shapes; batch phases: one untimed pass of the same workload),
           and every XLA compile inside a timed phase is counted (jax.monitoring): 0 expected;
  -> <out>/engine[_hf][_llama8b]_<device>.json and .md (device, jax version, settings, every row).
A time budget skips the remaining phases (recorded as skipped) so the run fits a 10-minute call.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from medha_jax import LLM, SamplingParams  # noqa: E402
from medha_jax.executor.buckets import Bucket  # noqa: E402
from medha_jax.executor.device_timeline import recording  # noqa: E402
from medha_jax.executor.executor import compile_events  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dummy_models import LLAMA3_8B, TINY, write_model_dir  # noqa: E402
from results_io import device_slug  # noqa: E402
from scheduler_overhead import percentile  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
RESULTS = ROOT / "benchmarks" / "results"

# (variant, page size, max_model_len) as the CPU tests run them
HF_CASES = [("tiny-llama3", 16, 4096), ("tiny-llama3-4l", 16, 4096), ("tiny-llama2", 8, None),
            ("tiny-llama-tied", 8, None)]

# ----------------------------------------------------------------------------- hf exactness
def check_hf(backends, budget_end, log, small=False):
    """Greedy tokens of every golden prompt, per (variant, backend); returns rows."""
    rows, skipped = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for variant, page, max_len in HF_CASES[:1] if small else HF_CASES:
            golden = json.loads((DATA / variant / "golden.json").read_text())
            cases = [p for p in golden["prompts"] if not small or len(p["token_ids"]) <= 40]
            d = Path(tmp) / variant
            shutil.copytree(DATA / variant, d)
            if not (d / "tokenizer.json").is_file():  # same vocab as tiny-llama3 (the CPU tests do this)
                shutil.copy(DATA / "tiny-llama3" / "tokenizer.json", d / "tokenizer.json")
            for backend in backends:
                if time.perf_counter() > budget_end:
                    skipped.append([variant, backend])
                    continue
                t0 = time.perf_counter()
                llm = LLM(model=str(d), scheduler="fcfs", mesh="tp=1", num_devices=1, dtype="float32",
                          attention_backend=backend, max_model_len=max_len, page_size=page,
                          num_pages=512, max_num_batched_tokens=256, max_num_seqs=8, warmup=False)
                sp = SamplingParams(max_tokens=golden["new_tokens"], temperature=0.0, ignore_eos=True)
                outs = llm.generate([p["token_ids"] for p in cases], sp)
                bad = [len(p["token_ids"]) for p, o in zip(cases, outs) if o.token_ids != p["greedy"]]
                row = dict(variant=variant, backend=llm.engine.executor.attention_backend,
                           prompts=[len(p["token_ids"]) for p in cases], new_tokens=golden["new_tokens"],
                           mismatched_prompts=bad, equal=not bad, seconds=time.perf_counter() - t0)
                rows.append(row)
                log(f"hf {variant:16s} {row['backend']:6s}: {'EQUAL' if not bad else f'MISMATCH at prompt lengths {bad}'}"
                    f" ({row['seconds']:.1f} s incl. compiles)")
                llm.close()
    return rows, skipped


# ----------------------------------------------------------------------------- llama-8b shape
def prompt_ids(n: int, vocab: int, salt: int) -> list[int]:
    """n token ids spread over the vocabulary (deterministic; no two prompts share a prefix)."""
    return [(salt * 7919 + i * 104729) % (vocab - 512) + 256 for i in range(n)]


def single_request_buckets(ex, prompt: int, new: int, chunk: int) -> list[Bucket]:
    """The buckets a lone request of `prompt` tokens hits under fcfs chunking, then its decodes."""
    page = ex.page_size
    out, done = [], 0
    while done < prompt:
        n = min(chunk, prompt - done)
        done += n
        out.append(ex.ladders.pick(n, 1, math.ceil(done / page)))
    for j in range(new):
        out.append(ex.ladders.pick(1, 1, math.ceil((prompt + j + 1) / page)))
    return out


class Phase:
    """Counts XLA compiles and wall time inside a `with` block."""

    def __enter__(self):
        self.compiles0, self.t0 = compile_events(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.compiles = compile_events() - self.compiles0
        self.seconds = time.perf_counter() - self.t0


def bench_llama8b(budget_end, log, small=False):
    cfg = TINY if small else LLAMA3_8B
    V = cfg["vocab_size"]
    ttft_lens = (64, 256, 1000) if small else (8192, 32768, 130000)
    streams, stream_in, stream_out = (4, 64, 16) if small else (32, 1024, 256)
    n_off, off_in, off_out = (8, 64, 16) if small else (64, 1024, 256)
    chunk = 64 if small else 2048
    settings = dict(load_format="dummy", dtype="bfloat16", mesh="tp=1", num_devices=1, scheduler="fcfs",
                    attention_backend="auto", max_model_len=131072, page_size=16,
                    max_num_batched_tokens=chunk, max_num_seqs=64, warmup=False)
    if small:
        settings.update(num_pages=512, max_model_len=2048)
    else:
        settings.update(kv_cache_memory_gb=30.0)
    report = dict(settings=settings, model={k: cfg[k] for k in ("hidden_size", "intermediate_size",
                  "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size")},
                  phases=[], skipped=[])
    with tempfile.TemporaryDirectory() as tmp:
        d = write_model_dir(Path(tmp), "llama3-8b-shape", cfg)
        t0 = time.perf_counter()
        llm = LLM(model=str(d), **settings)
        report["init_seconds"] = time.perf_counter() - t0
        ex = llm.engine.executor
        report["attention_backend"] = ex.attention_backend
        report["num_pages"] = llm.engine.stats().total_kv_pages
        log(f"8b-shape: engine up in {report['init_seconds']:.1f} s ({ex.attention_backend} attention, "
            f"{report['num_pages']} KV pages)")
        greedy = lambda n: SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)

        # --- concurrent streams and offline throughput first (the host/device overlap they show is
        # what a cut budget should keep): one untimed pass first, then timed
        for name, n, n_in, n_out in (("tpot", streams, stream_in, stream_out), ("offline", n_off, off_in, off_out)):
            if time.perf_counter() > budget_end:
                report["skipped"].append([name, n])
                continue
            prompts = [prompt_ids(n_in, V, 100 + j) for j in range(n)]
            tw = time.perf_counter()
            llm.generate([prompt_ids(n_in, V, 1000 + j) for j in range(n)], greedy(n_out))
            warm_s = time.perf_counter() - tw
            with recording(ex) as timeline:
                with Phase() as ph:
                    outs = llm.generate(prompts, greedy(n_out))
                idle, idle_s, ticks = timeline.idle_fraction()
            tpots = [o.metrics.tpot for o in outs if o.metrics.tpot is not None]
            ttfts = [o.metrics.ttft for o in outs]
            gen = sum(len(o.token_ids) for o in outs)
            row = dict(phase=name, requests=n, prompt_tokens=n_in, new_tokens=n_out, wall_s=ph.seconds,
                       output_tokens_per_s=gen / ph.seconds, total_tokens_per_s=(gen + n * n_in) / ph.seconds,
                       tpot_p50_s=statistics.median(tpots), tpot_p90_s=percentile(tpots, 90),
                       ttft_p50_s=statistics.median(ttfts), ttft_max_s=max(ttfts),
                       warmup_pass_s=warm_s, compiles_in_phase=ph.compiles,
                       device_idle_fraction=idle, device_idle_s=idle_s, ticks=ticks,
                       host_ms=timeline.host_summary(), host=timeline.describe_host())
            report["phases"].append(row)
            log(f"{name} {n} x ({n_in} in, {n_out} out): {ph.seconds:.2f} s, {row['output_tokens_per_s']:,.0f} out tok/s, "
                f"{row['total_tokens_per_s']:,.0f} total tok/s, tpot p50 {1e3 * row['tpot_p50_s']:.1f} ms "
                f"p90 {1e3 * row['tpot_p90_s']:.1f} ms; device idle {100 * idle:.1f}% of {ticks} ticks; "
                f"{ph.compiles} compiles while timed; {row['host']}")

        # --- TTFT, one request at a time (its chunk shapes compiled first)
        for i, L in enumerate(ttft_lens):
            if time.perf_counter() > budget_end:
                report["skipped"].append(["ttft", L])
                continue
            tc = time.perf_counter()
            n_new = ex.precompile(single_request_buckets(ex, L, 8, chunk))
            compile_s = time.perf_counter() - tc
            known = set(ex._compiled)
            with Phase() as ph:
                out = llm.generate([prompt_ids(L, V, i)], greedy(8))[0]
            m = out.metrics
            row = dict(phase="ttft", prompt_tokens=L, ttft_s=m.ttft, tpot_s=m.tpot,
                       prefill_tokens_per_s=L / m.ttft, compiled_before=n_new, compile_s=compile_s,
                       compiles_in_phase=ph.compiles, new_tokens=len(out.token_ids),
                       buckets_missed=[str(b) for b in set(ex._compiled) - known])  # what the precompile list lacked
            report["phases"].append(row)
            log(f"ttft {L:7d} tokens: {m.ttft:.3f} s ({L / m.ttft:,.0f} tok/s), tpot {1e3 * m.tpot:.1f} ms; "
                f"{n_new} buckets compiled first in {compile_s:.1f} s, {ph.compiles} compiles while timed")
        report["compiles_after_warmup_total"] = sum(p["compiles_in_phase"] for p in report["phases"])
        llm.close()
    return report


# ----------------------------------------------------------------------------- report
def write_report(report, out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = device_slug(report["device"])
    stem = "engine" + ("_hf" if report.get("hf") else "") + ("_llama8b" if report.get("llama8b") else "")
    jpath, mpath = out_dir / f"{stem}_{slug}.json", out_dir / f"{stem}_{slug}.md"
    jpath.write_text(json.dumps(report, indent=1, default=str))
    lines = [f"# The engine on {report['device']}", "",
             f"jax {report['jax']}, mode {report['mode']}, {report['elapsed_s']:.0f} s. "
             f"Command: `{report['command']}`.", ""]
    if report.get("hf"):
        lines += ["## Greedy tokens vs Hugging Face (float32, exact f32 matmuls)", "",
                  "| checkpoint | attention | prompts (tokens) | new tokens | equal | s (incl. compiles) |",
                  "|---|---|---|---|---|---|"]
        for r in report["hf"]:
            eq = "yes" if r["equal"] else f"NO (prompts {r['mismatched_prompts']})"
            lines.append(f"| {r['variant']} | {r['backend']} | {r['prompts']} | {r['new_tokens']} | {eq} | "
                         f"{r['seconds']:.1f} |")
        if report.get("hf_skipped"):
            lines.append(f"\nSkipped for time: {report['hf_skipped']}")
    b = report.get("llama8b")
    if b:
        lines += ["", "## Llama-3-8B shape, random weights, bfloat16", "",
                  f"Settings: `{b['settings']}`; attention {b['attention_backend']}; {b['num_pages']} KV pages; "
                  f"engine start (weights + KV cache, no compiles) {b['init_seconds']:.1f} s.", "",
                  "| phase | shape | TTFT | TPOT | throughput | device idle between ticks | compiles while timed |",
                  "|---|---|---|---|---|---|---|"]
        for r in b["phases"]:
            if r["phase"] == "ttft":
                lines.append(f"| ttft | 1 x {r['prompt_tokens']} in, {r['new_tokens']} out | {r['ttft_s']:.3f} s | "
                             f"{1e3 * r['tpot_s']:.1f} ms | {r['prefill_tokens_per_s']:,.0f} prefill tok/s | | "
                             f"{r['compiles_in_phase']} |")
            else:
                lines.append(f"| {r['phase']} | {r['requests']} x ({r['prompt_tokens']} in, {r['new_tokens']} out) | "
                             f"p50 {r['ttft_p50_s']:.3f} s, max {r['ttft_max_s']:.3f} s | p50 {1e3 * r['tpot_p50_s']:.1f} ms, "
                             f"p90 {1e3 * r['tpot_p90_s']:.1f} ms | {r['output_tokens_per_s']:,.0f} out tok/s, "
                             f"{r['total_tokens_per_s']:,.0f} total tok/s | "
                             f"{100 * r['device_idle_fraction']:.1f}% of {r['ticks']} ticks | {r['compiles_in_phase']} |")
        lines += [f"\nHost work per step, {r['phase']}: {r['host']}" for r in b["phases"] if r.get("host")]
        if b["skipped"]:
            lines.append(f"\nSkipped for time: {b['skipped']}")
    mpath.write_text("\n".join(lines) + "\n")
    return jpath, mpath


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf", action="store_true", help="greedy tokens vs the committed HF goldens")
    ap.add_argument("--backends", default="xla,pallas", help="attention backends for --hf")
    ap.add_argument("--llama8b", action="store_true", help="Llama-3-8B-shaped random-weight model timings")
    ap.add_argument("--small", action="store_true", help="tiny shapes: a CPU dry run of the code paths")
    ap.add_argument("--budget-s", type=float, default=480.0, help="skip remaining phases after this")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    on_gpu = jax.default_backend() == "gpu"
    if not on_gpu and not args.small:
        print("engine_gpu.py: no GPU found; use --small for a CPU dry run of the code paths", file=sys.stderr)
        return 2
    start = time.perf_counter()
    budget_end = start + args.budget_s
    log = lambda msg: print(f"[{time.perf_counter() - start:6.1f}s] {msg}", flush=True)
    dev = jax.devices()[0]
    report = dict(device=dev.device_kind, jax=jax.__version__, mode="gpu" if on_gpu else "cpu-dry-run",
                  command="python benchmarks/engine_gpu.py " + " ".join(argv if argv is not None else sys.argv[1:]))
    log(f"device {dev.device_kind}")
    ok = True
    if args.hf:
        with jax.default_matmul_precision("highest"):  # HF's goldens are exact f32 (no tf32)
            report["hf"], report["hf_skipped"] = check_hf(args.backends.split(","), budget_end, log, args.small)
        ok = all(r["equal"] for r in report["hf"])
    if args.llama8b:
        report["llama8b"] = bench_llama8b(budget_end, log, args.small)
    report["elapsed_s"] = time.perf_counter() - start
    jpath, mpath = write_report(report, args.out)
    log(f"wrote {jpath} and {mpath}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.92")
    sys.exit(main())

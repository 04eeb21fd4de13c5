"""medha-jax against Hugging Face transformers on the same job and device, same run, interleaved.

    python benchmarks/vs_hf.py --hf-python /work/hf311/bin/python     # results/vs_hf_cpu.{json,md}
    python benchmarks/vs_hf.py --hf-python ... --small                 # seconds: a code-path check
    python benchmarks/vs_hf.py --hf-python python3 --hf-path T --device gpu --dtype bfloat16
                                                                       # results/vs_hf_<gpu>.{json,md}

Needs a Python with torch and transformers (`python3.11 -m venv V && V/bin/pip install
torch==2.13.0 transformers`; on the GPU machines, whose image has torch but not transformers,
`benchmarks/gpu_session.sh vs-hf` installs the wheels `benchmarks/hf_wheels.sh` fetched into T);
it runs benchmarks/hf_worker.py.

Data flow: the HF worker makes a random Llama with transformers (LLAMA_31M: 8 layers, hidden 512,
GQA 8:2, vocab 8192, float32; max_position_embeddings 32768) and saves it as safetensors -> both
systems load that directory (medha-jax: `LLM(model=dir, dtype="float32")`, every other setting
its default, num_pages raised only so one 16K-token prompt fits; `--dtype` for both, on the
`--device` for both: HF's model moved to "cuda", JAX's default backend) -> one untimed pass of every
job on each (compiles; medha-jax then waits for its background compiler) -> `repeats` rounds, each
running every job on both systems, the order reversed every other round; every pass has new prompts
(the same for both systems), so medha-jax's prefix cache never skips a prefill HF has to do ->
  offline: 16 prompts x 512 tokens, 64 new, greedy (HF: one `generate` call on the batch)
  prefill: one prompt of 2K / 8K / 16K tokens, max_tokens=1 (HF: one forward, last logits only)
-> one more medha-jax pass of each job with the device timeline on (its ticks, ms a tick, device
idle between ticks) -> medians, medha-jax / HF throughput ratios, greedy-token agreement, load averages ->
results/vs_hf_{cpu,<gpu>}.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from dummy_models import LLAMA_31M, TINY, batch_prompts, write_model_dir  # noqa: E402
from results_io import device_slug, provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
HERE = Path(__file__).resolve().parent


def medha_ticks(llm, run) -> dict:
    """One more pass of a job with the executor's DeviceTimeline on: how many ticks it took, the
    fraction of its span the device sat idle between them (the host's share, asynchronous
    scheduling included) and the host's median milliseconds a step by phase (`HOST_PHASES`)."""
    from medha_jax.executor.device_timeline import recording
    with recording(llm.engine.executor) as timeline:
        seconds, _ = run()
        idle, _, ticks = timeline.idle_fraction()
    return dict(ticks=ticks, seconds=seconds, device_idle_fraction=idle, host_ms=timeline.host_summary(),
                host=timeline.describe_host())


class HFWorker:
    def __init__(self, python: str, path: str = ""):
        self.p = subprocess.Popen([python, str(HERE / "hf_worker.py")], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": path})

    def call(self, **msg) -> dict:
        self.p.stdin.write(json.dumps(msg) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError("the Hugging Face worker died (see its stderr above)")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def close(self) -> None:
        self.p.stdin.close()
        self.p.wait(60)


def hf_config(cfg: dict) -> dict:
    keep = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "head_dim", "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings", "tie_word_embeddings",
            "bos_token_id", "eos_token_id", "rope_scaling", "hidden_act")
    return {k: cfg[k] for k in keep if k in cfg}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hf-python", required=True, help="a Python with torch and transformers")
    ap.add_argument("--hf-path", default="", help="PYTHONPATH of the HF worker (where transformers was installed)")
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu",
                    help="gpu: HF on cuda, medha-jax on JAX's default backend (which must be a GPU)")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="both systems' weights and KV")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prefill-lens", default="2048,8192,16384")
    ap.add_argument("--small", action="store_true", help="tiny model and jobs: a code-path check")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/medha_vs_hf"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None)
    args = ap.parse_args(argv)
    cfg = {**(TINY if args.small else LLAMA_31M), "max_position_embeddings": 32768}
    prompts, prompt_len, new_tokens = (4, 48, 8) if args.small else (16, 512, 64)
    lens = [int(x) for x in args.prefill_lens.split(",")] if not args.small else [256, 1024]
    log = lambda m: print(f"[vs_hf {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731

    model_dir = write_model_dir(args.workdir, "tiny-hf" if args.small else "llama-31m-hf", cfg)  # tokenizer
    import jax

    device = jax.devices()[0]
    if (device.platform == "gpu") != (args.device == "gpu"):
        ap.error(f"--device {args.device}, but JAX's default device is {device.device_kind} ({device.platform})")
    hf = HFWorker(args.hf_python, args.hf_path)
    info = hf.call(op="info")
    if args.device == "gpu" and not info["cuda"]:
        ap.error("--device gpu, but the HF worker's torch sees no CUDA device")
    hf.call(op="make", dir=str(model_dir), config=hf_config(cfg), seed=0)
    loaded = hf.call(op="load", dir=str(model_dir), device="cuda" if args.device == "gpu" else "cpu", dtype=args.dtype)
    attn = loaded["attn"]
    log(f"HF: torch {info['torch']}, transformers {info['transformers']}, {info['threads']} threads, attention {attn}, "
        f"on {loaded['device']}; medha-jax on {device.device_kind}")

    from medha_jax import LLM, SamplingParams

    pages = (max(lens) + 64) // 16 + 64
    settings = dict(dtype=args.dtype, num_pages=max(1024, pages), profile_dir=str(args.workdir / "profiles"),
                    compilation_cache_dir=str(args.workdir / "xla"))
    t0 = time.perf_counter()
    llm = LLM(model=str(model_dir), **settings)
    start_s = time.perf_counter() - t0
    log(f"medha-jax up in {start_s:.1f} s")
    V = cfg["vocab_size"]
    # New prompts for every pass (both systems get the same ones): medha-jax's prefix cache would
    # otherwise serve a repeated prompt's KV and skip the prefill HF has to do.
    job = lambda r: batch_prompts(prompts, prompt_len, V, r)  # noqa: E731
    # A prompt per (length, pass): with the pass alone, the 8K prompt began with the 2K one's tokens and
    # the 16K with the 8K's, so until stop 65 medha-jax's prefix cache served 2K of the 8K prefill and
    # 8K of the 16K one (`medha_prefill` now refuses any cached token).
    longs = lambda n, r: [(i * 2654435761 + r * 15485863 + n * 104729) % (V - 512) + 256  # noqa: E731
                          for i in range(n)]
    sp_job = SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)
    sp_one = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)

    def medha_offline(r):
        t = time.perf_counter()
        outs = llm.generate(job(r), sp_job)
        seconds = time.perf_counter() - t
        if any(o.metrics.num_cached_tokens for o in outs):
            raise RuntimeError(f"offline pass {r}: prompt tokens came from the prefix cache, which HF has to compute")
        return seconds, [o.token_ids for o in outs]

    def hf_offline(r):
        out = hf.call(op="generate", prompts=job(r), max_new_tokens=new_tokens)
        return out["seconds"], out["tokens"]

    def medha_prefill(n, r):
        t = time.perf_counter()
        out = llm.generate([longs(n, r)], sp_one)[0]
        seconds = time.perf_counter() - t
        if out.metrics.num_cached_tokens:
            raise RuntimeError(f"prefill {n}, pass {r}: {out.metrics.num_cached_tokens} tokens came from the prefix "
                               "cache, which HF has to compute")
        return seconds, out.token_ids[0]

    def hf_prefill(n, r):
        out = hf.call(op="prefill", prompt=longs(n, r))
        return out["seconds"], out["token"]

    jobs = [("offline", medha_offline, hf_offline)] + [
        (f"prefill {n}", (lambda r, n=n: medha_prefill(n, r)), (lambda r, n=n: hf_prefill(n, r))) for n in lens]
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    for name, m, h in jobs:  # untimed: compiles (medha-jax), allocator warm-up (both)
        m(0), h(0)
    llm.engine.executor.wait_compiled(1800)
    log(f"untimed pass and background compiles done in {time.perf_counter() - t0:.1f} s")
    compiles_before = llm.engine.executor.compiles_after_warmup
    times = {name: {"medha": [], "hf": []} for name, _, _ in jobs}
    agree = {}
    for rep in range(args.repeats):
        for name, m, h in jobs:
            order = [("medha", m), ("hf", h)] if rep % 2 == 0 else [("hf", h), ("medha", m)]
            res = {}
            for who, fn in order:
                sec, toks = fn(rep + 1)
                times[name][who].append(sec)
                res[who] = toks
            agree[name] = res
            log(f"round {rep + 1} {name}: medha {times[name]['medha'][-1]:.2f} s, hf {times[name]['hf'][-1]:.2f} s")
    ticks = {name: medha_ticks(llm, lambda m=m: m(args.repeats + 1)) for name, m, _ in jobs}  # after the timed rounds
    rows = []
    for name, _, _ in jobs:
        mm, hm = statistics.median(times[name]["medha"]), statistics.median(times[name]["hf"])
        a = agree[name]
        if name == "offline":
            same = sum(x == y for x, y in zip(a["medha"], a["hf"]))
            agreement = f"{same}/{len(a['hf'])} sequences identical"
        else:
            agreement = "same token" if a["medha"] == a["hf"] else "different token"
        rows.append(dict(job=name, medha_s=mm, hf_s=hm, medha_runs=times[name]["medha"], hf_runs=times[name]["hf"],
                         speedup=hm / mm, agreement=agreement, **ticks[name]))
    report = dict(run_info("vs_hf.py", argv, load_before), hf=dict(info, attention=attn, device=loaded["device"]),
                  device=device.device_kind, medha_settings=settings, medha_start_s=start_s,
                  compiles_in_timed_rounds=llm.engine.executor.compiles_after_warmup - compiles_before,
                  model=cfg, repeats=args.repeats, rows=rows)
    hf.close()
    where = "cpu" if args.device == "cpu" else device_slug(device.device_kind)
    name = args.name or f"vs_hf_{where}{'_small' if args.small else ''}"
    lines = [f"# medha-jax vs Hugging Face transformers ({time.strftime('%Y-%m-%d')})", "",
             f"{provenance(report)} torch {info['torch']} "
             f"({info['threads']} threads, attention `{attn}`, on {loaded['device']}), transformers "
             f"{info['transformers']}; medha-jax on {device.device_kind}.", "",
             f"Model: random Llama made with transformers ({cfg['num_hidden_layers']} layers, hidden "
             f"{cfg['hidden_size']}, GQA {cfg['num_attention_heads']}:{cfg['num_key_value_heads']}, vocab "
             f"{cfg['vocab_size']}, {args.dtype}), the same safetensors for both. medha-jax: `LLM(model=dir, "
             f"dtype=\"{args.dtype}\", num_pages={settings['num_pages']})`, every other setting its default (scheduler, "
             f"shape ladders, background compilation), started in {start_s:.1f} s. Offline: {prompts} prompts x "
             f"{prompt_len} tokens, {new_tokens} new, greedy (HF: one `generate` on the batch). Prefill N: one "
             f"prompt, max_tokens=1 (HF: one forward returning the last position's logits). Median of "
             f"{args.repeats} rounds, systems interleaved, order reversed every other round; compiles during "
             f"the timed rounds: {report['compiles_in_timed_rounds']}.", "",
             "| job | medha-jax | Hugging Face | HF time / medha-jax time | greedy tokens | every run (medha / hf) "
             "| medha-jax ticks, ms a tick, device idle between them (one more pass) | medha-jax host ms a step, "
             "by phase (same pass) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = ", ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(r["medha_runs"], r["hf_runs"]))
        lines.append(f"| {r['job']} | {r['medha_s']:.3f} s | {r['hf_s']:.3f} s | {r['speedup']:.2f}x | "
                     f"{r['agreement']} | {runs} | {r['ticks']}, {1e3 * r['seconds'] / max(1, r['ticks']):.1f} ms, "
                     f"{100 * r['device_idle_fraction']:.1f}% | {r['host']} |")
    write_results(args.out, name, report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())

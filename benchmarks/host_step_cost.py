"""Host time per engine step, part by part, with no device: what the device waits for when it is faster.

  N running decodes (contexts drawn from [--min-ctx, --max-ctx], page size 16) + a prefill chunk
  per step from a queue of prompts, the engine's default policy and a linear runtime predictor
  -> per step, timed separately (time.perf_counter, median and p90 over --steps steps):
       schedule      Scheduler.schedule(now)
       step_input    StepInput.from_batch(batch): the snapshot the executor reads
       pack          executor.packing.pack_batch at a bucket that holds the step (the host arrays
                     the compiled step gets; what Executor.pack does after choosing the bucket)
       finish        Scheduler.on_batch_done + update_from_output (one token per sequence), each
                     token detokenized as the engine does (`OutputStream.on_token`, the demo
                     model's byte-level tokenizer)
       outputs       one `RequestOutput` per request that got a token (`OutputStream.output`)
  -> printed, and written to benchmarks/results/host_step_cost_<name>.json with the machine

Why: with asynchronous scheduling the host forms and packs step n+1 while the device runs step n,
so the device idles whenever the host's part takes longer than a device step: on a GPU a decode
step of a small model over a few hundred sequences takes a few milliseconds. Pure Python and
numpy (no JAX), so it runs anywhere.

  PYTHONPATH=. python benchmarks/host_step_cost.py [--decodes 256] [--steps 300] [--name NAME]
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

from medha_jax.executor.buckets import Bucket  # noqa: E402
from medha_jax.executor.packing import pack_batch  # noqa: E402
from medha_jax.demo_model import byte_tokenizer  # noqa: E402
from medha_jax.kv_cache_manager import KVCacheManager  # noqa: E402
from medha_jax.output_stream import OutputStream  # noqa: E402
from medha_jax.request import Request, RequestStatus  # noqa: E402
from medha_jax.sampling_params import SamplingParams  # noqa: E402
from medha_jax.scheduler import RuntimePredictor, SchedulerConfig, make_scheduler  # noqa: E402
from medha_jax.step_input import StepInput  # noqa: E402
from results_io import cpu_model  # noqa: E402

COEFS = {"const": 4e-3, "tokens": 6e-5, "decodes": 2e-5, "decode_kv": 1e-8}
PARTS = ("schedule", "step_input", "pack", "finish", "outputs")
PAGE = 16


def run(decodes: int, steps: int, min_ctx: int, max_ctx: int, seed: int) -> dict:
    rng = random.Random(seed)
    kv = KVCacheManager(num_pages_per_group=1 << 18, page_size=PAGE)
    sched = make_scheduler(SchedulerConfig(policy=SchedulerConfig().policy, max_num_seqs=2 * decodes), kv,
                           RuntimePredictor(COEFS))
    n = 0
    tokenizer = byte_tokenizer()
    streams: dict[str, OutputStream] = {}

    def request(prompt_len: int) -> Request:
        nonlocal n
        n += 1
        r = Request(f"q{n}", [rng.randrange(32, 127) for _ in range(prompt_len)],
                    SamplingParams(max_tokens=1 << 20, temperature=0.7, top_p=0.9, seed=n), arrival_time=0.0)
        streams[r.request_id] = OutputStream(tokenizer, r)
        return r

    def on_token(req: Request, tok: int, special: bool) -> str | None:  # what Engine._update passes
        got.append(req)
        return streams[req.request_id].on_token(tok, special)

    for _ in range(decodes):  # running decodes, their prompts computed by hand (untimed)
        sched.add_decoding(request(rng.randint(min_ctx, max_ctx)), 1)
    times = {p: [] for p in PARTS}
    sizes = []
    now = 0.0
    for _ in range(steps):
        while sched.num_waiting < 4:
            sched.add_request(request(rng.randint(256, 4096)))
        t0 = time.perf_counter()
        batch = sched.schedule(now)
        t1 = time.perf_counter()
        step = StepInput.from_batch(batch)
        t2 = time.perf_counter()
        width = max((len(t) for s in step.seqs for t in s.page_tables), default=1)
        pack_batch(step, Bucket(tokens=step.num_tokens, seqs=step.num_rows, pages=width), PAGE)
        t3 = time.perf_counter()
        now += batch.predicted_time or 0.01
        got: list[Request] = []
        sampled = [rng.randrange(32, 127) for _ in range(batch.num_seqs)]
        t3b = time.perf_counter()
        sched.on_batch_done(batch, now, measured_time=batch.predicted_time)
        sched.update_from_output(batch, sampled, now, on_token=on_token)
        t4 = time.perf_counter()
        [streams[r.request_id].output([r.output_token_ids[-1]]) for r in got]
        t5 = time.perf_counter()
        for p, dt in zip(PARTS, (t1 - t0, t2 - t1, t3 - t2, t4 - t3b, t5 - t4)):
            times[p].append(dt * 1e3)
        sizes.append((batch.num_seqs, batch.num_tokens, width))
        # keep the decode count: the newest decodes beyond `decodes` finish
        extra = [r for r in sched.running if not r.is_prefill][decodes:]
        for r in extra:
            sched.finish(r, RequestStatus.FINISHED_LENGTH, now)
            del streams[r.request_id]
    out = {p: {"median_ms": statistics.median(v), "p90_ms": sorted(v)[int(0.9 * (len(v) - 1))]} for p, v in times.items()}
    total = [sum(times[p][i] for p in PARTS) for i in range(steps)]
    out["total"] = {"median_ms": statistics.median(total), "p90_ms": sorted(total)[int(0.9 * (steps - 1))]}
    return {"decodes": decodes, "steps": steps, "ctx": [min_ctx, max_ctx], "parts": out,
            "mean_seqs": statistics.fmean(s for s, _, _ in sizes), "mean_tokens": statistics.fmean(t for _, t, _ in sizes),
            "mean_page_columns": statistics.fmean(w for _, _, w in sizes)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--decodes", default="64,256", help="comma-separated decode counts, a row each")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--min-ctx", type=int, default=256)
    ap.add_argument("--max-ctx", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="cpu")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    rows = []
    for d in (int(x) for x in args.decodes.split(",")):
        res = run(d, args.steps, args.min_ctx, args.max_ctx, args.seed)
        p = res["parts"]
        print(f"{d:4d} decodes ({res['mean_seqs']:.0f} seqs, {res['mean_tokens']:.0f} tokens, "
              f"{res['mean_page_columns']:.0f} page columns): "
              + "  ".join(f"{k} {v['median_ms']:.3f}" for k, v in p.items()) + "  ms (medians)", flush=True)
        rows.append(res)
    machine = {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "python": sys.version.split()[0],
               "load_average_at_end": os.getloadavg()}
    path = Path(args.out) / f"host_step_cost_{args.name}.json"
    path.write_text(json.dumps({"benchmark": "host_step_cost", "argv": sys.argv[1:], "machine": machine, "rows": rows},
                               indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

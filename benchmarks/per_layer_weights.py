"""The engine's tick over stacked layer weights vs over per-layer buffers, side by side.

    python benchmarks/per_layer_weights.py                      # decodes of 1/16/64 seqs, prefills of 512/2048
    python benchmarks/per_layer_weights.py --rounds 9 --batches d16,p512

Data flow: the 31M benchmark Llama (`dummy_models.LLAMA_31M`: 8 layers, D 512, F 1536, GQA 8:2,
vocab 8192), seeded random float32 params on one device -> two of the engine's own tick programs
(`pipeline_step.make_step`, XLA paged attention): one over the stacked [L, ...] weights (a
`lax.scan` that slices layer l out of the stack, which XLA:CPU copies), one over
`sharding.unstack_layers`'s per-layer buffers (what the executor runs on one CPU stage: a switch
per projection picks layer l's own buffer) -> per batch, `--rounds` interleaved rounds of each
(the KV cache donated and carried from call to call, as the engine does), median ms a tick, the
ratio, the largest difference between the two programs' logits, and each program's compile
time (lower + compile, this process's first) -> results/NAME.json/.md
(default per_layer_weights_<platform>) with the machine and its load.

Batches: dN = N decoding sequences, one token each at 544 positions of context (the offline job's
middle); pN = one N-token prefill chunk at position 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dummy_models import LLAMA_31M  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402
from tick_batches import CONTEXT, PAGE, time_ticks  # noqa: E402

from medha_jax.checkpoint.hf_config import parse_hf_config  # noqa: E402
from medha_jax.mesh import make_mesh  # noqa: E402
from medha_jax.model import sharding  # noqa: E402
from medha_jax.model.init import init_params  # noqa: E402
from pallas_kernels.reference import paged_attention_xla  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", default="d1,d16,d64,p512,p2048")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None, help="default per_layer_weights_<platform>")
    args = ap.parse_args(argv)
    load_before = os.getloadavg()
    cfg = parse_hf_config(LLAMA_31M)
    mesh = make_mesh({"tp": 1}, devices=jax.devices()[:1])
    stacked = init_params(cfg, mesh, seed=0)
    forms = {"stacked": (stacked, paged_attention_xla, False),
             "per-layer": (sharding.unstack_layers(stacked, cfg, mesh), paged_attention_xla, True)}
    rows = []
    for spec in args.batches.split(","):
        res = time_ticks(forms, spec, cfg, mesh, args.rounds, reps=20 if spec[0] == "d" else 2)
        diff = float(np.max(np.abs(res["stacked"]["logits"] - res["per-layer"]["logits"])))
        ms = {name: r["ms"] for name, r in res.items()}
        compile_s = {name: r["compile_s"] for name, r in res.items()}
        a, b = statistics.median(ms["stacked"]), statistics.median(ms["per-layer"])
        rows.append(dict(batch=spec, stacked_ms=a, per_layer_ms=b, speedup=a / b, max_abs_diff=diff, rounds_ms=ms,
                         compile_s=compile_s))
        print(f"{spec}: stacked {a:.2f} ms, per-layer {b:.2f} ms ({a / b:.2f}x), logits max diff {diff:.1e}; "
              f"compiled in {compile_s['stacked']:.1f} / {compile_s['per-layer']:.1f} s", flush=True)
    platform = jax.devices()[0].platform
    report = dict(run_info("per_layer_weights.py", argv, load_before), device=str(jax.devices()[0].device_kind),
                  config=LLAMA_31M, rounds=args.rounds, rows=rows)
    lines = [f"# The tick over stacked vs per-layer weights (XLA:{platform.upper()}, {report['device']})", "",
             f"{provenance(report)} The 31M benchmark Llama (8 layers, D 512, F 1536, GQA 8:2, vocab 8192), float32, "
             f"one device, the engine's tick program (`make_step`, XLA paged attention, pages of {PAGE}) over the "
             f"stacked weights and over `sharding.unstack_layers`'s per-layer buffers. dN: N decodes at {CONTEXT} "
             f"positions of context; pN: one N-token prefill chunk. Median of {args.rounds} interleaved rounds.", "",
             "| batch | stacked (ms a tick) | per-layer (ms a tick) | speed-up | logits max abs diff | "
             "compile, stacked / per-layer (s) |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['stacked_ms']:.2f} | {r['per_layer_ms']:.2f} | {r['speedup']:.2f}x | "
                     f"{r['max_abs_diff']:.1e} | {r['compile_s']['stacked']:.1f} / {r['compile_s']['per-layer']:.1f} |")
    write_results(args.out, args.name or f"per_layer_weights_{platform}", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The engine's tick with and without the XLA prefill tiles' key splits, side by side.

    python benchmarks/xla_key_splits.py                          # demo model, pages of 64 (the convoy's)
    python benchmarks/xla_key_splits.py --model llama31m --page 16 --name xla_key_splits_llama31m_cpu

A prefill tile narrower than `reference.XLA_SPLIT_Q` queries walks `key_splits(tile)` whole key
blocks per loop step, side by side (`paged_attention_xla(split_q=...)`); split_q 1 walks one block
per step (the loop before key splits).

Data flow: the model's config (`--model demo`: `demo_model.DEMO_CONFIG`, 4 layers, D 64, GQA 8:2,
head_dim 16, what `benchmarks/convoy.py` serves; `llama31m`: `dummy_models.LLAMA_31M`, 8 layers,
D 512, GQA 8:2, head_dim 64, the offline job's) -> seeded random float32 params on one device, per-layer
buffers as the executor runs them -> one tick program (`pipeline_step.make_step`) per split_q, each
with `paged_attention_xla(split_q=v)` -> per batch (`tick_batches.py`: pN@C = one N-token prefill
chunk after C cached tokens, dN@C = N decodes), `--rounds` interleaved rounds of every program,
median ms a tick, each program's time over the first's, the largest difference of its logits from
the first's -> results/NAME.json/.md with the machine and its load.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dummy_models import LLAMA_31M  # noqa: E402
from tick_batches import compare_batches, per_layer_params, write_comparison  # noqa: E402

from medha_jax.checkpoint.hf_config import parse_hf_config  # noqa: E402
from medha_jax.demo_model import DEMO_CONFIG  # noqa: E402
from pallas_kernels.reference import XLA_SPLIT_Q, key_splits, paged_attention_xla, tile_sizes  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = {"demo": lambda: DEMO_CONFIG, "llama31m": lambda: parse_hf_config(LLAMA_31M)}
DEFAULT_BATCHES = ("p32@30000,p64@30000,p96@16000,p128@30000,p128@8000,p160@30000,p256@30000,p32@3000,p96@2000,"
                   "p200@500,p512@2000,d16")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="demo")
    ap.add_argument("--page", type=int, default=64,
                    help="tokens a page (the convoy serves 64, the engine's default is 16)")
    ap.add_argument("--split-q", default=f"1,{XLA_SPLIT_Q}", help="programs: paged_attention_xla split_q values; "
                    "the first is the baseline (1: one key block a step)")
    ap.add_argument("--batches", default=DEFAULT_BATCHES)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None, help="default xla_key_splits_<model>_<platform>")
    args = ap.parse_args(argv)
    splits = [int(v) for v in args.split_q.split(",")]
    if args.page < 1 or args.page & (args.page - 1):
        ap.error(f"--page {args.page}: must be a power of two")
    if any(v < 1 for v in splits):
        ap.error(f"--split-q {args.split_q}: every value must be >= 1")
    load_before = os.getloadavg()
    cfg = MODELS[args.model]()
    mesh, params = per_layer_params(cfg)
    programs = {v: (params, functools.partial(paged_attention_xla, split_q=v), True) for v in splits}
    label = lambda v: f"split_q {v}"  # noqa: E731
    rows = compare_batches(programs, splits, args.batches, cfg, mesh, args.rounds, label, prefill_reps=3,
                           page=args.page)
    per_tile = {str(v): {str(t): key_splits(t, v) for t in tile_sizes()} for v in splits}
    write_comparison(
        args.out, args.name or f"xla_key_splits_{args.model}_{{platform}}", "xla_key_splits.py", argv, load_before,
        rows, splits, label, f"The tick with the XLA prefill tiles' key splits, split_q {', '.join(map(str, splits))}",
        f"Model `{args.model}` (random float32 weights, one device, per-layer buffers), "
        f"pages of {args.page} tokens, the engine's tick program (`make_step`, XLA paged attention). Key blocks "
        "a tile walks per step, by tile size: "
        + "; ".join(f"split_q {v}: " + ", ".join(f"{t}-query {k}" for t, k in per_tile[str(v)].items())
                    for v in splits)
        + f". pN@C: one N-token prefill chunk after C cached tokens; dN: N decodes. Median of {args.rounds} "
        "interleaved rounds; time and logits compared with the first program.",
        model=args.model, page=args.page, rounds=args.rounds, split_q=splits, key_splits=per_tile)
    return 0


if __name__ == "__main__":
    sys.exit(main())

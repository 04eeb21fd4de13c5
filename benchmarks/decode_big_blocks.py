"""The engine's tick with the XLA decode loop's big key blocks at different byte budgets, side by side.

    python benchmarks/decode_big_blocks.py                        # off (64-key blocks alone), 4 MB, 8 MB
    python benchmarks/decode_big_blocks.py --budgets-mb 0,8,16 --batches d16@4096,d64@2000 --rounds 9

Data flow: the 31M benchmark Llama (`dummy_models.LLAMA_31M`: 8 layers, D 512, F 1536, GQA 8:2,
vocab 8192), seeded random float32 params on one device, split into per-layer buffers as the
executor runs them on one CPU stage -> one of the engine's tick programs (`pipeline_step.make_step`)
per budget, each with `paged_attention_xla(decode_big_block_bytes=MB << 20)` (0: every decode key
in 64-key blocks, as before big blocks) -> per batch (`tick_batches.py`: dN@C = N decodes at C
positions of context, pN = a prefill chunk, which the decode loop does not touch), `--rounds`
interleaved rounds of every program (the KV cache donated and carried from call to call, as the
engine does), median ms a tick, each budget's time over the first's, and the largest difference of
its logits from the first's -> results/NAME.json/.md (default decode_big_blocks_<platform>) with
the machine and its load.
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
from tick_batches import PAGE, compare_batches, per_layer_params, write_comparison  # noqa: E402

from medha_jax.checkpoint.hf_config import parse_hf_config  # noqa: E402
from pallas_kernels.reference import paged_attention_xla  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _budgets(text: str) -> list[float]:
    try:
        budgets = [float(b) for b in text.split(",")]
    except ValueError:
        budgets = []
    if not budgets or any(b < 0 for b in budgets) or len(set(budgets)) != len(budgets):
        raise argparse.ArgumentTypeError(f"{text!r}: want distinct megabyte budgets >= 0, e.g. 0,4,8")
    return budgets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--budgets-mb", type=_budgets, default=[0.0, 4.0, 8.0],
                    help="float32 key megabytes a big block gathers over all sequence slots; 0: no big blocks")
    ap.add_argument("--batches", default="d16,d16@4096,d4@2000,d64@2000,d256@600,d1@16384,p512")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None, help="default decode_big_blocks_<platform>")
    args = ap.parse_args(argv)
    budgets = args.budgets_mb
    load_before = os.getloadavg()
    cfg = parse_hf_config(LLAMA_31M)
    mesh, params = per_layer_params(cfg)
    programs = {b: (params, functools.partial(paged_attention_xla, decode_big_block_bytes=int(b * (1 << 20))), True)
                for b in budgets}
    label = lambda b: f"{b:g} MB"  # noqa: E731
    rows = compare_batches(programs, budgets, args.batches, cfg, mesh, args.rounds, label)
    write_comparison(
        args.out, args.name or "decode_big_blocks_{platform}", "decode_big_blocks.py", argv, load_before, rows, budgets,
        label, f"The tick with the decode loop's big key blocks at {', '.join(f'{b:g}' for b in budgets)} MB",
        "The 31M benchmark Llama (8 layers, D 512, F 1536, GQA 8:2, vocab 8192), float32, "
        f"one device, per-layer weight buffers, the engine's tick program (`make_step`, XLA paged attention, "
        f"pages of {PAGE}, 64-key small decode blocks) with big decode blocks sized by each budget (0 MB: "
        f"none). dN@C: N decodes at C positions of context (544 when not given), in the smallest sequence "
        f"bucket holding N (at least 4 slots); pN: one N-token prefill chunk (the decode loop does not "
        f"apply). Median of {args.rounds} interleaved rounds; time and logits compared with the first budget.",
        config=LLAMA_31M, rounds=args.rounds, budgets_mb=budgets)
    return 0


if __name__ == "__main__":
    sys.exit(main())

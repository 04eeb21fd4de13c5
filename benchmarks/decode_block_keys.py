"""The engine's tick with the XLA decode loop's key blocks of different widths, side by side.

    python benchmarks/decode_block_keys.py                     # 128 (before), 64 (default), 32 keys
    python benchmarks/decode_block_keys.py --block-keys 128,64 --batches d16,d64@2000 --rounds 9

Data flow: the 31M benchmark Llama (`dummy_models.LLAMA_31M`: 8 layers, D 512, F 1536, GQA 8:2,
vocab 8192), seeded random float32 params on one device, split into per-layer buffers as the
executor runs them on one CPU stage -> one of the engine's tick programs (`pipeline_step.make_step`)
per block width, each with `paged_attention_xla(block_pages=keys // page)` -> per batch
(`tick_batches.py`: dN@C = N decodes at C positions of context, pN = a prefill chunk, which the
decode block does not touch), `--rounds` interleaved rounds of every program (the KV cache donated
and carried from call to call, as the engine does), median ms a tick, each width's time over the
first's, and the largest difference of its logits from the first's -> results/NAME.json/.md
(default decode_block_keys_<platform>) with the machine and its load.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--block-keys", default="128,64,32", help="decode key-block widths, multiples of the page (16)")
    ap.add_argument("--batches", default="d1,d16,d64,d256@600,d64@2000,d16@4096,d1@16384,p512")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None, help="default decode_block_keys_<platform>")
    args = ap.parse_args(argv)
    widths = [int(k) for k in args.block_keys.split(",")]
    if any(k < PAGE or k % PAGE for k in widths):
        ap.error(f"--block-keys {args.block_keys}: every width must be a positive multiple of the page ({PAGE})")
    load_before = os.getloadavg()
    cfg = parse_hf_config(LLAMA_31M)
    mesh, params = per_layer_params(cfg)
    programs = {k: (params, functools.partial(paged_attention_xla, block_pages=k // PAGE), True) for k in widths}
    label = lambda k: f"{k} keys"  # noqa: E731
    rows = compare_batches(programs, widths, args.batches, cfg, mesh, args.rounds, label)
    write_comparison(
        args.out, args.name or "decode_block_keys_{platform}", "decode_block_keys.py", argv, load_before, rows, widths,
        label, f"The tick with decode key blocks of {', '.join(map(str, widths))} keys",
        "The 31M benchmark Llama (8 layers, D 512, F 1536, GQA 8:2, vocab 8192), float32, "
        f"one device, per-layer weight buffers, the engine's tick program (`make_step`, XLA paged attention, "
        f"pages of {PAGE}) with the decode loop's key block at each width. dN@C: N decodes at C positions of "
        f"context (544 when not given); pN: one N-token prefill chunk (the decode block does not apply). "
        f"Median of {args.rounds} interleaved rounds; time and logits compared with the first width.",
        config=LLAMA_31M, rounds=args.rounds, block_keys=widths)
    return 0


if __name__ == "__main__":
    sys.exit(main())

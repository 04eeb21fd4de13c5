"""How many shape buckets the start-up profile needs: fit on the compositions that fall in N buckets
(`runtime_profiler.in_few_buckets`, what a cold start measures), predict the rest.

    python benchmarks/quick_profile_buckets.py            # the committed full CPU profile
    python benchmarks/quick_profile_buckets.py --profile P.json --max-tokens 512 --max-seqs 16 --max-pages 128

Data flow: a full profile's measured samples (every composition timed in its own bucket) -> the
bucket each falls in under the given ladders -> for each N: fit on the samples in the N buckets
chosen, mean absolute percentage error on the samples in every other bucket (what the start-up
profile has to extrapolate to) -> printed table. Pure Python, no device.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from medha_jax.executor.buckets import BucketLadders  # noqa: E402
from medha_jax.runtime_profiler import composition_bucket, fit_with_holdout, in_few_buckets  # noqa: E402
from medha_jax.scheduler import RuntimePredictor  # noqa: E402
from medha_jax.scheduler.attention_tiling import Tiling  # noqa: E402
from medha_jax.scheduler.records import Composition  # noqa: E402

DEFAULT = Path(__file__).resolve().parent / "results" / "predictor_profile_demo_cpu.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", type=Path, default=DEFAULT)
    ap.add_argument("--max-tokens", type=int, default=512, help="the ladders the profile was measured with")
    ap.add_argument("--max-seqs", type=int, default=16)
    ap.add_argument("--max-pages", type=int, default=128)
    ap.add_argument("--page-size", type=int, default=16)
    ap.add_argument("--buckets", default="4,6,8,10,12")
    args = ap.parse_args(argv)
    data = json.loads(args.profile.read_text())
    samples = [(Composition.from_json(c), t) for c, t in data["samples"]]
    # the tiling it was measured with (profiles before version 3: the default engine shapes)
    tiling = Tiling(**data["tiling"]) if "tiling" in data else Tiling.for_engine(args.page_size, 8, 4)
    ladders = BucketLadders.build(max_tokens=args.max_tokens, max_seqs=args.max_seqs, max_pages=args.max_pages)
    def bucket_of(c):
        return composition_bucket(ladders, args.page_size, c)

    print(f"{args.profile.name}: {len(samples)} samples in {len({bucket_of(c) for c, _ in samples})} buckets; "
          f"all of them, 5-fold held-out MAPE {100 * fit_with_holdout(samples, tiling=tiling)[1]:.1f}%")
    print("| buckets measured | samples | held-out MAPE in them | MAPE in the other buckets (samples) |")
    print("|---|---|---|---|")
    for n in (int(x) for x in args.buckets.split(",")):
        keep = {id(c) for c in in_few_buckets([c for c, _ in samples], bucket_of, n)}
        train = [s for s in samples if id(s[0]) in keep]
        test = [s for s in samples if id(s[0]) not in keep]
        other = RuntimePredictor.fit(train, tiling=tiling).mape(test) if test else float("nan")
        print(f"| {n} | {len(train)} | {100 * fit_with_holdout(train, tiling=tiling)[1]:.1f}% | {100 * other:.1f}% "
              f"({len(test)}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

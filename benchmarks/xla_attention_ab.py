"""One layer of XLA-path attention (what a CPU runs), this tree's backend vs an earlier revision's,
in one process, interleaved.

    python benchmarks/xla_attention_ab.py --before 4f18bac
    python benchmarks/xla_attention_ab.py --before HEAD~1 --cases 1x8192+0,16x512+0 --rounds 12

Data flow: `git show REV:pallas_kernels/reference.py` -> a temporary module beside this tree's
`pallas_kernels.reference` -> per case (S sequences, each a chunk of C tokens after K cached
keys, written SxC+K; C = 1 makes them decodes; groups joined by '/' share one batch, e.g.
15x1+600/1x1+32700: fifteen short decodes beside a long one) random q (S*C x 8 heads x 64) and a paged KV
cache (GQA 8:2, pages of 16, the pages shuffled) -> `paged_attention_xla` with its defaults jitted
from each module -> one compile call each, then `--rounds` timed calls alternating which goes
first -> median ms, after / before, the largest output difference -> results/NAME.json/.md
(default xla_attention_ab_<platform>) with the machine and its load.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from results_io import provenance, run_info, write_results  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
CASES = "1x8192+0,1x2048+14336,1x512+8192,16x512+0,16x1+544,64x1+2000"


def _case(spec: str) -> list[tuple[int, int]]:
    """'SxC+K[/SxC+K...]' -> (C, K) per sequence."""
    seqs = []
    for group in spec.split("/"):
        try:
            n, rest = group.split("x")
            chunk, cached = rest.split("+")
            s, c, k = int(n), int(chunk), int(cached)
        except ValueError:
            s = c = k = -1
        if s < 1 or c < 1 or k < 0:
            raise ValueError(f"case {spec!r}: want SxC+K (S sequences, C new tokens each, after K cached keys), "
                             "groups joined by '/'")
        seqs += [(c, k)] * s
    return seqs


def _module_at(rev: str, tmp: Path):
    """pallas_kernels/reference.py as of `rev`, imported under another name (its imports are this tree's)."""
    try:
        text = subprocess.run(["git", "show", f"{rev}:pallas_kernels/reference.py"], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as e:
        raise SystemExit(f"--before {rev}: {e.stderr.strip()}") from None
    path = tmp / "reference_before.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("reference_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv=None) -> int:
    import jax
    import jax.numpy as jnp
    import numpy as np

    import pallas_kernels.reference as after

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="a git revision whose pallas_kernels/reference.py to compare")
    ap.add_argument("--cases", default=CASES, help="SxC+K, ...: S sequences, C new tokens each, K cached keys")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--name", default=None, help="default xla_attention_ab_<platform>")
    args = ap.parse_args(argv)
    try:
        cases = [_case(c) for c in args.cases.split(",")]
    except ValueError as e:
        ap.error(str(e))
    load_before = os.getloadavg()
    H, KVH, Dh, page = 8, 2, 64, 16
    rng = np.random.default_rng(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        before = _module_at(args.before, Path(tmp))
        for spec, seqs in zip(args.cases.split(","), cases):
            C, K = np.array([c for c, _ in seqs]), np.array([k for _, k in seqs])
            S, P = len(seqs), int(max(-(-(C + K) // page)))
            N = S * P + 1
            kp = jnp.asarray(rng.standard_normal((N, page, KVH, Dh), np.float32))  # kp: f32[N, page, KVH, Dh]
            vp = jnp.asarray(rng.standard_normal((N, page, KVH, Dh), np.float32))
            table = jnp.asarray(rng.permutation(N)[:S * P].reshape(S, P), jnp.int32)  # table: i32[S, P]
            q = jnp.asarray(rng.standard_normal((int(C.sum()), H, Dh), np.float32))  # q: f32[sum C, H, Dh]
            cu = jnp.asarray(np.concatenate([[0], np.cumsum(C)]), jnp.int32)
            qo, kl = jnp.asarray(K, jnp.int32), jnp.asarray(K + C, jnp.int32)
            fns = {name: jax.jit(lambda q, kp, vp, m=m: m.paged_attention_xla(q, kp, vp, table, cu, qo, kl,
                                                                               scale=0.125)[0])
                   for name, m in (("before", before), ("after", after))}
            outs = {name: np.asarray(f(q, kp, vp)) for name, f in fns.items()}
            ms: dict[str, list[float]] = {name: [] for name in fns}
            for r in range(args.rounds):
                for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    t0 = time.perf_counter()
                    fns[name](q, kp, vp).block_until_ready()
                    ms[name].append((time.perf_counter() - t0) * 1e3)
            a, b = statistics.median(ms["before"]), statistics.median(ms["after"])
            diff = float(np.max(np.abs(outs["before"] - outs["after"])))
            rows.append(dict(case=spec, before_ms=a, after_ms=b, ratio=b / a, max_abs_diff=diff, rounds_ms=ms))
            print(f"{spec}: before {a:.1f} ms, after {b:.1f} ms ({b / a:.3f}x), max diff {diff:.1e}", flush=True)
    platform = jax.devices()[0].platform
    report = dict(run_info("xla_attention_ab.py", argv, load_before), device=str(jax.devices()[0].device_kind),
                  before=args.before, rounds=args.rounds, rows=rows)
    lines = [f"# XLA-path attention, this tree vs {args.before} (XLA:{platform.upper()}, {report['device']})", "",
             f"{provenance(report)} One layer: 8 heads, GQA 8:2, head_dim 64, float32, pages of 16 (shuffled), "
             f"`paged_attention_xla` with its defaults from each revision, one process, median of {args.rounds} "
             "calls alternating which goes first. SxC+K: S sequences, C new tokens each after K cached keys "
             "(C = 1: decodes); groups joined by '/' share one batch.", "",
             "| case | before (ms) | after (ms) | after / before | max abs diff |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {r['before_ms']:.1f} | {r['after_ms']:.1f} | {r['ratio']:.3f}x | "
                     f"{r['max_abs_diff']:.1e} |")
    write_results(args.out, args.name or f"xla_attention_ab_{platform}", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Sweep the Pallas kernels' tuning knobs (`KernelConfig`) on a GPU: is a tile shape, warp count,
pipeline depth or split rule faster than the defaults, at the shapes the engine runs?

    python benchmarks/kernel_tune_gpu.py --budget-s 200     # on a GPU
    python benchmarks/kernel_tune_gpu.py --small            # CPU, interpret mode: the code path

Why: on the H200 (benchmarks/results/h200/) the prefill kernel took 1.4-3.0x cuDNN's time and the
decode kernel ~55 us a layer for one 8K-token sequence (its KV read floor ~11 us), every one of
them with the defaults, which were picked without a GPU. One lease can try the alternatives.

Data flow, per case (Llama-3-8B heads: H 32, KVH 8, Dh 128, bf16, 16-token pages scattered over
a pool; kernels_gpu.make_batch):
  prefill  one chunk C over context L: (2048, 16K) and (512, 4K), `prefill_attention`
  decode   B sequences at KV length L: (1, 8K) (the engine's one-request tick), (32, 2K), (8, 128K),
           `decode_attention`
  -> the XLA path's output on the same inputs (the check) -> per variant of the kind's knobs (the
     defaults first, then one knob changed, then two, ...): out / lse vs the check (bf16 tolerance of
     kernels_gpu), ms per call (kernels_gpu.time_call: a jitted loop over rotating queries, the
     work list built inside as the engine does, median of 5)
  -> case i stops trying variants when (i + 1) / n of the time budget is spent
-> <out>/kernel_tune_<device>.json and .md: per case every variant's time and its ratio to the
   defaults, fastest first; variants that fail the check or to compile are listed with why.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import math
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels_gpu import RTOL, TOL, make_batch, max_errors, rotations, run_jit, time_call  # noqa: E402
from pallas_kernels.config import device_config  # noqa: E402
from pallas_kernels.decode import decode_attention  # noqa: E402
from pallas_kernels.prefill import prefill_attention  # noqa: E402
from pallas_kernels.reference import paged_attention_xla  # noqa: E402
from results_io import device_slug  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"

# Knob values per kind, the default (KernelConfig()'s) first. The defaults are timed first, then
# every single-knob change, then pairs, and so on: a sweep cut by the budget has tried each knob.
PREFILL_KNOBS = dict(prefill_rows=(128, 64, 256), block_kv=(64, 32, 128), num_warps=(None, 4, 8), num_stages=(2, 3, 4))
DECODE_KNOBS = dict(block_kv=(64, 16, 32, 128), decode_num_warps=(4, 2, 8), decode_grid_waves=(4, 1, 2, 8),
                    max_decode_splits=(16, 64))
SMALL_KNOBS = dict(prefill=dict(block_kv=(64, 32)), decode=dict(block_kv=(64, 16)))


def variants(knobs: dict) -> list[dict]:
    """Every combination of the knob values, by how many knobs differ from the defaults (the
    first value of each): the defaults, then one knob changed, then two, ..."""
    names = list(knobs)
    combos = [dict(zip(names, combo)) for combo in itertools.product(*(knobs[n] for n in names))]
    return sorted(combos, key=lambda c: sum(c[n] != knobs[n][0] for n in names))  # stable: product order within


def cases(small: bool) -> list[tuple[str, tuple]]:
    if small:
        return [("prefill", (16, 64)), ("decode", (2, 256))]
    pre = [("prefill", (2048, 16384)), ("prefill", (512, 4096))]
    dec = [("decode", (1, 8192)), ("decode", (32, 2048)), ("decode", (8, 131072))]
    return [c for pair in itertools.zip_longest(dec, pre) for c in pair if c is not None]


def make_case(kind, params, key, small):
    dims = dict(H=4, KVH=2, Dh=64, min_pool_bytes=0) if small else {}
    if kind == "prefill":
        C, L = params
        return make_batch(key, [(C, L)], **dims), prefill_attention
    B, L = params
    return make_batch(key, [(1, L - 1)] * B, **dims), decode_attention


def sweep(kind, params, key, *, small, interpret, reps, deadline, log) -> dict:
    b, fn = make_case(kind, params, key, small)
    scale = 1 / math.sqrt(b.Dh)
    want = run_jit(functools.partial(paged_attention_xla, scale=scale), b.args, interpret)
    qs = rotations(jax.random.fold_in(key, 7), b.args[0])
    rec = dict(kind=kind, params=params, rows=[], skipped=0)
    knobs = (SMALL_KNOBS[kind] if small else PREFILL_KNOBS if kind == "prefill" else DECODE_KNOBS)
    for over in variants(knobs):
        if time.perf_counter() > deadline:
            rec["skipped"] += 1
            continue
        row = dict(knobs=over)
        try:
            cfg = device_config(**over)
            call = functools.partial(fn, scale=scale, config=cfg, interpret=interpret)
            got = run_jit(call, b.args, interpret)
            out_err, excess, lse_err, same_inf = max_errors(got, want, RTOL["bfloat16"])
            row.update(max_abs_out=out_err, max_abs_lse=lse_err,
                       ok=bool(same_inf and excess <= TOL["bfloat16"] and lse_err <= TOL["bfloat16"]))
            if row["ok"]:
                row["ms"] = time_call(call, qs, b.args[1:], reps=reps, repeats=1 if small else 5)
        except Exception as e:  # a variant Triton cannot compile (registers, shared memory) is recorded
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        rec["rows"].append(row)
        log(f"{kind:8s} {params} {over}: " + (f"{row['ms']:.3f} ms" if "ms" in row else
                                               row.get("error") or f"check FAILED (out {row['max_abs_out']:.2e})"))
    base = rec["rows"][0].get("ms") if rec["rows"] else None
    for row in rec["rows"]:
        if base and "ms" in row:
            row["vs_default"] = row["ms"] / base
    return rec


def write_report(report, out_dir: Path):
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"kernel_tune_{device_slug(report['device'])}"
    jpath, mpath = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    jpath.write_text(json.dumps(report, indent=1, default=str))
    lines = [f"# Kernel knobs on {report['device']}", "",
             f"jax {report['jax']}, {report['elapsed_s']:.0f} s, mode {report['mode']}. Per case: every variant tried, "
             "fastest first; `vs default` = its time / the defaults' (`KernelConfig()` but num_sms from the device). "
             "Llama-3-8B heads (32 q / 8 kv, head dim 128), bf16, 16-token pages.", ""]
    for rec in report["cases"]:
        lines += [f"## {rec['kind']} {tuple(rec['params'])}"
                  + (f" ({rec['skipped']} variants skipped for time)" if rec["skipped"] else ""), "",
                  "| knobs | ms | vs default | max abs out |", "|---|---|---|---|"]
        timed = sorted((r for r in rec["rows"] if "ms" in r), key=lambda r: r["ms"])
        for r in timed:
            knobs = ", ".join(f"{k}={v}" for k, v in r["knobs"].items())
            default = " (default)" if r is rec["rows"][0] else ""
            lines.append(f"| {knobs}{default} | {r['ms']:.3f} | {r.get('vs_default', float('nan')):.2f}x | "
                         f"{r['max_abs_out']:.1e} |")
        for r in rec["rows"]:
            if "ms" not in r:
                why = r.get("error") or f"check failed: out {r['max_abs_out']:.2e}, lse {r['max_abs_lse']:.2e}"
                lines.append(f"| {', '.join(f'{k}={v}' for k, v in r['knobs'].items())} | - | - | {why} |")
        lines.append("")
    mpath.write_text("\n".join(lines))
    return jpath, mpath


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="tiny shapes, two variants, interpret mode on the CPU")
    ap.add_argument("--budget-s", type=float, default=240.0, help="skip the variants left after this")
    ap.add_argument("--reps", type=int, default=20, help="calls per timed loop")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    on_gpu = jax.default_backend() == "gpu"
    if not on_gpu and not args.small:
        print("kernel_tune_gpu.py: no GPU found; use --small for a CPU dry run", file=sys.stderr)
        return 2
    start = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - start:6.1f}s] {msg}", flush=True)  # noqa: E731
    seed = args.seed if args.seed is not None else time.time_ns() % (1 << 31)
    key = jax.random.key(seed)
    log(f"device {jax.devices()[0].device_kind}, seed {seed}")
    report = dict(device=jax.devices()[0].device_kind, jax=jax.__version__, seed=seed,
                  mode="gpu" if on_gpu else "cpu-interpret", cases=[])
    todo = cases(args.small)
    for i, (kind, params) in enumerate(todo):
        # Case i may run until its share of the budget ends: (i + 1) / n of it, so what an earlier
        # case left unused goes to the later ones.
        rec = sweep(kind, params, jax.random.fold_in(key, i), small=args.small, interpret=not on_gpu,
                    reps=2 if args.small else args.reps, deadline=start + args.budget_s * (i + 1) / len(todo), log=log)
        report["cases"].append(rec)
        report["elapsed_s"] = time.perf_counter() - start
        write_report(report, args.out)  # after every case: a killed run keeps what it measured
    jpath, mpath = write_report(report, args.out)
    log(f"wrote {jpath} and {mpath}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

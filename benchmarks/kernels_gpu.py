"""Check and time the Pallas paged-attention kernels on a GPU against the reference and peers.

    python benchmarks/kernels_gpu.py                  # on a GPU: checks, then timings (< 10 min)
    python benchmarks/kernels_gpu.py --quick          # fewer timing cases
    python benchmarks/kernels_gpu.py --interpret --small   # CPU: the checks in interpret mode

Data flow:
  1. device facts: name, SM count; measured copy bandwidth (x + 1 over a 1 GiB bf16 buffer)
     and bf16 matmul rate (8192^3), the denominators of every %-of-peak below;
  2. checks: each kernel (prefill, decode, fused POD) with interpret=False on fresh random
     inputs (jax.random) vs `paged_attention_reference` at small shapes (f32 within 1e-4, bf16
     within 2e-2: every edge case of the tests) and vs `paged_attention_xla` at a medium bf16
     shape; a failed check stops the script before any timing;
  3. timings, POD-paper shapes and long contexts (Llama-3-8B heads: H 32, KVH 8, Dh 128, bf16,
     page 16, pages scattered at random over a pool larger than L2):
       prefill  chunk C in 32..2048 over context 4K..128K: ours vs cuDNN
                (`jax.nn.dot_product_attention(implementation="cudnn")`: chunk-vs-context
                unmasked + chunk-vs-chunk causal, merged by LSE), TFLOP/s and % of matmul peak;
       decode   batch 8..256 at KV 4K..128K: ours (split-K kernel; fused kernel) vs the in-tree
                `decode_attention.gqa` (contiguous KV) and `paged_attention` (paged), GB/s and %
                of copy bandwidth;
       hybrid   a chunk plus a decode batch: fused POD kernel vs serial prefill + decode kernels
                (`ours_serial`: the two kernels over the whole batch, split by the traced metadata,
                what `paged_attention(backend="pallas")` runs; `serial_ours`: split statically)
                (and cuDNN + in-tree paged decode), speed-up of fusion;
     time per call = wall time of a jitted `fori_loop` of n calls on rotating query buffers
     (launch overhead amortised; the full output is the loop carry, so nothing is hoisted or
     sliced away) / n, median of several repeats. Our numbers include building the work list
     with jnp per call, except `ours_serial_planned`: the serial kernels with their plan built
     once outside the loop, as the engine's layers run them (one plan a step for every layer);
  4. writes benchmarks/results/kernels_<device>.json and .md (device name in both).
A time budget skips the remaining cases (recorded as skipped) so the run stays well under 10 min.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pallas_kernels.config import device_config  # noqa: E402
from pallas_kernels.decode import decode_attention  # noqa: E402
from pallas_kernels.merge import merge_attention  # noqa: E402
from pallas_kernels.pod import pod_attention  # noqa: E402
from pallas_kernels.prefill import prefill_attention  # noqa: E402
from pallas_kernels.reference import paged_attention_reference, paged_attention_xla  # noqa: E402
from pallas_kernels.serial import serial_attention, serial_plan  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_io import device_slug  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
TOL = {"float32": 1e-4, "bfloat16": 2e-2}  # absolute, plus RTOL * |reference| on out
RTOL = {"float32": 0.0, "bfloat16": 2.0**-7}  # one bf16 ulp: both sides round their output once


# ----------------------------------------------------------------------------- batches
@dataclasses.dataclass
class Batch:
    args: tuple  # the contract's inputs
    seqs: list  # [(q_len, ctx)]
    H: int
    KVH: int
    Dh: int
    page: int


def make_batch(key, seqs, *, H=32, KVH=8, Dh=128, page=16, dtype=jnp.bfloat16, pad_tokens=0,
               min_pool_bytes=256 << 20, kv_override=None):
    """Contract inputs for [(q_len, ctx)] with kv = ctx + q_len (or kv_override), pages shuffled."""
    kv = [c + q for q, c in seqs] if kv_override is None else kv_override
    need = [-(-n // page) for n in kv]
    P = max(1, max(need))
    page_bytes = page * KVH * Dh * jnp.dtype(dtype).itemsize
    N = max(sum(need) + 1, min_pool_bytes // page_bytes)
    kq, kk, kv_, kp = jax.random.split(key, 4)
    perm = np.asarray(jax.random.permutation(kp, N))
    table = np.zeros((len(seqs), P), np.int32)
    at = 0
    for s, n in enumerate(need):
        table[s, :n] = perm[at:at + n]
        at += n
    q_lens = [q for q, _ in seqs]
    cu = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32)
    T = int(cu[-1]) + pad_tokens
    args = (
        jax.random.normal(kq, (T, H, Dh), jnp.float32).astype(dtype),
        jax.random.normal(kk, (N, page, KVH, Dh), jnp.float32).astype(dtype),
        jax.random.normal(kv_, (N, page, KVH, Dh), jnp.float32).astype(dtype),
        jnp.asarray(table), jnp.asarray(cu), jnp.asarray([c for _, c in seqs], jnp.int32),
        jnp.asarray(kv, jnp.int32),
    )
    return Batch(args, list(seqs), H, KVH, Dh, page)


def edge_seqs(p):
    """Every edge case of tests/kernels (prefills first, then decodes); kv overrides for KVP."""
    seqs = [(p + 1, 0), (p - 1, p), (2 * p + 3, p + 1), (p, 3), (0, 5), (5, 1000), (3, 200), (1, 7),
            (1, 0), (1, p - 1), (1, p), (1, 3 * p + 2), (1, 500)]
    kv = [q + c for q, c in seqs]
    kv[5], kv[6], kv[12] = p + 1, 0, 0
    return seqs, kv


def contiguous_kv(batch, kv_len):
    """Peers' layout: [B, kv_len, KVH, Dh] gathered from the pages of each sequence."""
    _, k, v, table = batch.args[:4]
    n = -(-kv_len // batch.page)
    gather = lambda x: x[table[:, :n]].reshape(table.shape[0], n * batch.page, batch.KVH, batch.Dh)[:, :kv_len]
    return gather(k), gather(v)


# ----------------------------------------------------------------------------- timing
def time_call(call, qs, rest, *, reps, repeats=5):
    """Median ms per call of call(q, *rest), q rotating over qs [R, ...] inside one jitted loop.

    Each iteration's whole output is the loop carry (and the loop's result), so XLA can neither
    hoist the call (its query changes) nor shrink it to the part a scalar summary would read.
    Arrays go in through `rest` (arguments), never by closure, so none becomes an HLO constant."""
    R = qs.shape[0]
    out_shape = jax.eval_shape(call, qs[0], *rest)

    @jax.jit
    def many(qs, *rest):
        init = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out_shape)
        return jax.lax.fori_loop(0, reps, lambda i, _: call(qs[i % R], *rest), init)

    jax.block_until_ready(many(qs, *rest))  # compile + warm up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(many(qs, *rest))
        times.append((time.perf_counter() - t) / reps * 1e3)
    return statistics.median(times)


def rotations(key, q, n=3):
    """n extra query buffers like q (fresh random), stacked with q: [n + 1, ...]."""
    extra = jax.random.normal(key, (n, *q.shape), jnp.float32).astype(q.dtype)
    return jnp.concatenate([q[None], extra])


def measure_peaks(reps=20):
    x = jnp.ones((2, 1 << 29), jnp.bfloat16)  # 2 x 1 GiB
    ms = time_call(lambda a: a + 1, x, (), reps=reps)
    copy_gbps = 2 * (1 << 29) * 2 / (ms * 1e-3) / 1e9
    n = 8192
    a = jax.random.normal(jax.random.key(1), (2, n, n), jnp.float32).astype(jnp.bfloat16)
    b = jax.random.normal(jax.random.key(2), (n, n), jnp.float32).astype(jnp.bfloat16)
    ms = time_call(lambda a, b: jnp.dot(a, b), a, (b,), reps=reps)
    return copy_gbps, 2 * n**3 / (ms * 1e-3) / 1e12


# ----------------------------------------------------------------------------- checks
def max_errors(got, want, rtol):
    """(max |out - ref|, max of |out - ref| - rtol |ref|, max |lse - ref| on finite rows, -inf rows equal)."""
    out, lse = (np.asarray(x, np.float32) for x in got)
    ref_out, ref_lse = (np.asarray(x, np.float32) for x in want)
    if np.isnan(out).any() or np.isnan(lse).any():
        return float("nan"), float("nan"), float("nan"), False
    same_inf = bool((np.isneginf(lse) == np.isneginf(ref_lse)).all())
    fin = np.isfinite(ref_lse) & np.isfinite(lse)
    lse_err = float(np.abs(lse[fin] - ref_lse[fin]).max()) if fin.any() else 0.0
    diff = np.abs(out - ref_out)
    return float(diff.max()), float((diff - rtol * np.abs(ref_out)).max()), lse_err, same_inf


KERNELS = {"prefill": prefill_attention, "decode": decode_attention, "pod": pod_attention, "serial": serial_attention}


def run_checks(key, *, interpret, small, log):
    """Each kernel vs the reference at edge-case shapes (and vs the xla path at a medium shape)."""
    checks = []
    cfg = device_config()
    cases = [(name, dt, G) for name in KERNELS for dt, G in ((jnp.float32, 4), (jnp.bfloat16, 8))]
    if small:
        cases = [("prefill", jnp.float32, 4), ("decode", jnp.float32, 4), ("pod", jnp.bfloat16, 8)]
    for i, (name, dtype, G) in enumerate(cases):
        page = 16 if i % 2 else 8
        seqs, kv = edge_seqs(page)
        if name == "decode":  # the decode kernel takes decode batches
            seqs, kv = [s for s in seqs if s[0] <= 1], [k for s, k in zip(seqs, kv) if s[0] <= 1]
        b = make_batch(jax.random.fold_in(key, i), seqs, H=2 * G, KVH=2, Dh=64 if small else 128,
                       page=page, dtype=dtype, pad_tokens=3, kv_override=kv, min_pool_bytes=0)
        scale = b.Dh ** -0.5
        fn = functools.partial(KERNELS[name], scale=scale, config=cfg, interpret=interpret)
        got = run_jit(fn, b.args, interpret)
        with jax.default_matmul_precision("highest"):  # exact f32 reference (a GPU's default is tf32)
            want = run_jit(functools.partial(paged_attention_reference, scale=scale), b.args, interpret)
        checks.append(_record(name, "reference", dtype, G, page, got, want, log))
    if not small:
        seqs = [(300, 1500), (77, 0)] + [(1, n) for n in (1, 16, 17, 999, 4000, 2500)]
        for name in ("prefill", "pod"):
            b = make_batch(jax.random.fold_in(key, 100), seqs, H=32, KVH=4, min_pool_bytes=0)
            got = jax.jit(functools.partial(KERNELS[name], scale=0.088, config=cfg, interpret=interpret))(*b.args)
            want = jax.jit(functools.partial(paged_attention_xla, scale=0.088))(*b.args)
            checks.append(_record(name, "xla", jnp.bfloat16, 8, 16, got, want, log))
    return checks


def run_jit(fn, args, interpret):
    """jit and run; in interpret mode (CPU, correctness only) skip XLA's slow CPU optimisations."""
    lowered = jax.jit(fn).lower(*args)
    options = {"xla_backend_optimization_level": 0} if interpret else None
    return lowered.compile(compiler_options=options)(*args)


def _record(name, against, dtype, G, page, got, want, log):
    name_ = jnp.dtype(dtype).name
    tol = TOL[name_]
    out_err, out_excess, lse_err, same_inf = max_errors(got, want, RTOL[name_])
    ok = same_inf and out_excess <= tol and lse_err <= tol
    rec = dict(kernel=name, against=against, dtype=jnp.dtype(dtype).name, G=G, page=page,
               max_abs_out=out_err, max_abs_lse=lse_err, tol=tol, ok=bool(ok))
    log(f"check {name:8s} vs {against:9s} {rec['dtype']:8s} G={G} page={page}: out {out_err:.2e} "
        f"lse {lse_err:.2e} -inf rows {'match' if same_inf else 'DIFFER'} -> {'ok' if ok else 'FAIL'}")
    return rec


# ----------------------------------------------------------------------------- peers
def cudnn_prefill(batch, C, L):
    """cuDNN chunked prefill: chunk vs cached context (unmasked) + chunk vs itself (causal)."""
    kc, vc = contiguous_kv(batch, L + C)
    scale = 1 / math.sqrt(batch.Dh)

    def call(q, k_ctx, v_ctx, k_new, v_new):
        q4 = q[None]  # [1, C, H, Dh]
        dpa = functools.partial(jax.nn.dot_product_attention, scale=scale, implementation="cudnn",
                                return_residual=True)
        o1, l1 = dpa(q4, k_ctx, v_ctx)
        o2, l2 = dpa(q4, k_new, v_new, is_causal=True)
        return merge_attention(jnp.stack([o1[0], o2[0]]), jnp.stack([l1[0], l2[0]]).astype(jnp.float32))

    return call, (kc[:1, :L], vc[:1, :L], kc[:1, L:], vc[:1, L:])


def intree_gqa_decode(batch, L, interpret=False):
    from jax.experimental.pallas.ops.gpu import decode_attention as intree

    k, v = contiguous_kv(batch, L)
    kv_len = batch.args[6]
    scale = 1 / math.sqrt(batch.Dh)
    splits = 16 if L % (16 * 128) == 0 else 1
    call = lambda q, k, v, kv_len: intree.gqa(q, k, v, kv_seq_len=kv_len, sm_scale=scale, k_splits=splits,
                                              interpret=interpret)
    return call, (k, v, kv_len)


def intree_paged_decode(batch, L, interpret=False):
    from jax.experimental.pallas.ops.gpu import paged_attention as intree

    _, k, v, table = batch.args[:4]
    kt, vt = jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2)  # [N, KVH, page, Dh]
    kt, vt = jnp.moveaxis(kt, 1, 0), jnp.moveaxis(vt, 1, 0)  # [KVH, N, page, Dh]
    n = -(-L // batch.page)
    splits = 16 if n % (16 * 8) == 0 else 1
    tbl = table[:, :n]
    lengths = batch.args[6]
    scale = 1 / math.sqrt(batch.Dh)
    call = lambda q, kt, vt, tbl, lengths: intree.paged_attention(
        (q * scale).astype(q.dtype), kt, vt, tbl, lengths, k_splits=splits, interpret=interpret)
    return call, (kt, vt, tbl, lengths)


# ----------------------------------------------------------------------------- cases
def ours(fn, batch, cfg, interpret=False):
    call = lambda q, *rest: fn(q, *rest, scale=1 / math.sqrt(batch.Dh), config=cfg, interpret=interpret)
    return call, batch.args[1:]


def planned(batch, cfg, interpret=False):
    """serial_attention with its `serial_plan` built once, outside the timed loop: what each layer
    of the engine's step pays (the plan goes in through the arguments, like the arrays)."""
    q, k = batch.args[0], batch.args[1]
    plan = jax.jit(lambda table, cu, qoff, kvl: serial_plan(
        table, cu, qoff, kvl, num_tokens=q.shape[0], num_heads=q.shape[1], kv_heads=k.shape[2],
        page_size=k.shape[1], num_pages=k.shape[0], config=cfg))(*batch.args[3:])
    call = lambda q, *rest: serial_attention(q, *rest[:-1], scale=1 / math.sqrt(batch.Dh), config=cfg,  # noqa: E731
                                             interpret=interpret, plan=rest[-1])
    return call, (*batch.args[1:], plan)


def prefill_flops(batch):
    """Causal-visible q.k^T and p.v FLOPs of the batch (4 * H * Dh per visible (query, key))."""
    total = 0
    for q, c in batch.seqs:
        total += q * c + q * (q + 1) // 2
    return 4 * batch.H * batch.Dh * total


def kv_bytes(batch):
    item = jnp.dtype(batch.args[1].dtype).itemsize
    return 2 * sum(q + c for q, c in batch.seqs) * batch.KVH * batch.Dh * item


def timing_cases(quick, small=False):
    pre = [(32, 4096), (512, 4096), (2048, 4096), (512, 16384), (2048, 16384), (2048, 131072)]
    dec = [(8, 4096), (8, 131072), (64, 16384), (256, 4096), (64, 4096), (8, 32768)]
    hyb = [(512, 4096, 64, 4096), (1024, 8192, 64, 8192), (2048, 16384, 32, 16384),
           (512, 16384, 128, 4096), (2048, 4096, 256, 4096)]
    if quick:
        pre, dec, hyb = pre[1:5:2], dec[:4], hyb[:3]
    if small:  # code-path exercise in interpret mode, not a measurement
        pre, dec, hyb = [(16, 64)], [(4, 256)], [(16, 64, 4, 256)]
    # round-robin over the kinds, so a time budget that cuts the list leaves some of each
    lists = [[("prefill", p) for p in pre], [("decode", d) for d in dec], [("hybrid", h) for h in hyb]]
    return [c for row in itertools.zip_longest(*lists) for c in row if c is not None]


def run_case(kind, params, key, cfg, reps, log, *, interpret=False, dims=None):
    rec = dict(kind=kind, params=params, ms={}, errors={})
    dims = dims or {}
    ip = interpret
    if kind == "prefill":
        C, L = params
        b = make_batch(key, [(C, L)], **dims)
        impls = {"ours_prefill": ours(prefill_attention, b, cfg, ip), "ours_pod": ours(pod_attention, b, cfg, ip),
                 "ours_serial": ours(serial_attention, b, cfg, ip), "ours_serial_planned": planned(b, cfg, ip),
                 "cudnn": cudnn_prefill(b, C, L)}
        rec["flops"] = prefill_flops(b)
    elif kind == "decode":
        B, L = params
        b = make_batch(key, [(1, L - 1)] * B, **dims)
        impls = {"ours_decode": ours(decode_attention, b, cfg, ip), "ours_pod": ours(pod_attention, b, cfg, ip),
                 "ours_serial": ours(serial_attention, b, cfg, ip), "ours_serial_planned": planned(b, cfg, ip),
                 "intree_gqa": intree_gqa_decode(b, L, ip),
                 "intree_paged": intree_paged_decode(b, L, ip)}
        rec["bytes"] = kv_bytes(b)
    else:
        C, Lp, B, Ld = params
        b = make_batch(key, [(C, Lp)] + [(1, Ld - 1)] * B, **dims)
        impls = {"ours_pod": ours(pod_attention, b, cfg, ip), "ours_serial": ours(serial_attention, b, cfg, ip),
                 "ours_serial_planned": planned(b, cfg, ip),
                 "serial_ours": serial(b, C, cfg, ip),
                 "serial_cudnn_intree": serial_peers(b, C, Lp, Ld, ip)}
        rec["flops"], rec["bytes"] = prefill_flops(b), kv_bytes(b)
    qs = rotations(jax.random.fold_in(key, 7), b.args[0])
    for name, (call, rest) in impls.items():
        try:
            rec["ms"][name] = time_call(call, qs, rest, reps=reps)
        except Exception as e:  # a peer that rejects the shape is recorded, not fatal
            rec["errors"][name] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
    _derive(rec)
    log(f"{kind:8s} {params}: " + ", ".join(f"{k} {v:.3f} ms" for k, v in rec["ms"].items())
        + ("" if not rec["errors"] else f"  (failed: {', '.join(rec['errors'])})"))
    return rec


def serial(b, C, cfg, interpret=False):
    """Prefill kernel on the chunk, then decode kernel on the decodes (two launches)."""
    scale = 1 / math.sqrt(b.Dh)

    def call(q, k, v, table, cu, qoff, kv):
        o1, l1 = prefill_attention(q[:C], k, v, table[:1], cu[:2], qoff[:1], kv[:1], scale=scale,
                                   config=cfg, interpret=interpret)
        o2, l2 = decode_attention(q[C:], k, v, table[1:], cu[1:] - C, qoff[1:], kv[1:], scale=scale,
                                  config=cfg, interpret=interpret)
        return jnp.concatenate([o1, o2]), jnp.concatenate([l1, l2])

    return call, b.args[1:]


def serial_peers(b, C, Lp, Ld, interpret=False):
    """cuDNN on the chunk, then the in-tree paged decode kernel on the decodes."""
    q, k, v, table, cu, qoff, kv = b.args
    pre_b = Batch((q[:C], k, v, table[:1], cu[:2], qoff[:1], kv[:1]), b.seqs[:1], b.H, b.KVH, b.Dh, b.page)
    dec_b = Batch((q[C:], k, v, table[1:], cu[1:] - C, qoff[1:], kv[1:]), b.seqs[1:], b.H, b.KVH, b.Dh, b.page)
    (pre, pre_rest), (dec, dec_rest) = cudnn_prefill(pre_b, C, Lp), intree_paged_decode(dec_b, Ld, interpret)
    n = len(pre_rest)
    call = lambda q, *rest: (pre(q[:C], *rest[:n]), dec(q[C:], *rest[n:]))
    return call, (*pre_rest, *dec_rest)


def _derive(rec):
    best_ours = min((v for k, v in rec["ms"].items() if k.startswith("ours")), default=None)
    if best_ours is None:
        return
    if "flops" in rec:
        rec["ours_tflops"] = rec["flops"] / (best_ours * 1e-3) / 1e12
    if "bytes" in rec:
        rec["ours_gbps"] = rec["bytes"] / (best_ours * 1e-3) / 1e9
    if rec["kind"] == "hybrid" and "serial_ours" in rec["ms"]:
        rec["fusion_speedup"] = rec["ms"]["serial_ours"] / rec["ms"]["ours_pod"]


# ----------------------------------------------------------------------------- report
def write_report(report, out_dir):
    out_dir.mkdir(parents=True, exist_ok=True)
    slug = device_slug(report["device"])
    jpath, mpath = out_dir / f"kernels_{slug}.json", out_dir / f"kernels_{slug}.md"
    jpath.write_text(json.dumps(report, indent=1, default=str))
    copy, mm = report.get("copy_gbps"), report.get("matmul_tflops")
    lines = [f"# Paged-attention kernels on {report['device']}", "",
             f"jax {report['jax']}, {report.get('sm_count')} SMs, mode {report['mode']}, "
             f"{report['elapsed_s']:.0f} s."]
    if copy:
        lines += [f"Measured peaks: copy {copy:.0f} GB/s, bf16 matmul {mm:.0f} TFLOP/s.", ""]
    lines += ["## Checks", "", "| kernel | vs | dtype | G | page | max abs out | max abs lse | ok |",
              "|---|---|---|---|---|---|---|---|"]
    for c in report["checks"]:
        lines.append(f"| {c['kernel']} | {c['against']} | {c['dtype']} | {c['G']} | {c['page']} | "
                     f"{c['max_abs_out']:.2e} | {c['max_abs_lse']:.2e} | {'yes' if c['ok'] else 'NO'} |")
    for kind, head in (("prefill", "chunk, context"), ("decode", "batch, kv"),
                       ("hybrid", "chunk, context, decodes, kv")):
        rows = [r for r in report.get("cases", []) if r["kind"] == kind]
        if not rows:
            continue
        names = sorted({n for r in rows for n in r["ms"]})
        lines += ["", f"## {kind} (ms per call)", "",
                  f"| {head} | " + " | ".join(names) + " | ours TFLOP/s (% peak) | ours GB/s (% copy) | fusion x |",
                  "|---" * (len(names) + 4) + "|"]
        for r in rows:
            ms = " | ".join(f"{r['ms'][n]:.3f}" if n in r["ms"] else "-" for n in names)
            tf = f"{r['ours_tflops']:.0f} ({100 * r['ours_tflops'] / mm:.0f}%)" if mm and "ours_tflops" in r else "-"
            bw = f"{r['ours_gbps']:.0f} ({100 * r['ours_gbps'] / copy:.0f}%)" if copy and "ours_gbps" in r else "-"
            fx = f"{r['fusion_speedup']:.2f}" if "fusion_speedup" in r else "-"
            lines.append(f"| {r['params']} | {ms} | {tf} | {bw} | {fx} |")
    if report.get("skipped"):
        lines += ["", f"Skipped for time: {report['skipped']}"]
    mpath.write_text("\n".join(lines) + "\n")
    return jpath, mpath


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--interpret", action="store_true", help="Pallas interpret mode (CPU): checks only")
    ap.add_argument("--timings", action="store_true",
                    help="with --interpret: also run the timing code on tiny shapes (exercises the "
                         "code paths; CPU numbers mean nothing, GPU-only peers record errors)")
    ap.add_argument("--small", action="store_true", help="small check shapes (head dim 64)")
    ap.add_argument("--quick", action="store_true", help="fewer timing cases")
    ap.add_argument("--budget-s", type=float, default=420.0, help="skip timing cases after this")
    ap.add_argument("--reps", type=int, default=20, help="calls per timed loop")
    ap.add_argument("--seed", type=int, default=None, help="input seed (default: from the clock)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    on_gpu = jax.default_backend() == "gpu"
    if not on_gpu and not args.interpret:
        print("kernels_gpu.py: no GPU found (jax backend is "
              f"{jax.default_backend()!r}). Run it on a CUDA GPU, or use --interpret --small to run "
              "the correctness checks in Pallas interpret mode on the CPU.", file=sys.stderr)
        return 2
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    start = time.perf_counter()
    log = lambda msg: print(f"[{time.perf_counter() - start:6.1f}s] {msg}", flush=True)
    dev = jax.devices()[0]
    seed = args.seed if args.seed is not None else int(time.time()) % (1 << 31)
    key = jax.random.key(seed)
    report = dict(device=dev.device_kind, sm_count=getattr(dev, "core_count", None), jax=jax.__version__,
                  mode="interpret" if args.interpret else "gpu", seed=seed)
    log(f"device {dev.device_kind}, seed {seed}")
    report["checks"] = run_checks(key, interpret=args.interpret, small=args.small, log=log)
    failed = [c for c in report["checks"] if not c["ok"]]
    gpu_run = on_gpu and not args.interpret
    if (gpu_run or args.timings) and not failed:
        if gpu_run:
            report["copy_gbps"], report["matmul_tflops"] = measure_peaks()
            log(f"peaks: copy {report['copy_gbps']:.0f} GB/s, bf16 matmul {report['matmul_tflops']:.0f} TFLOP/s")
        cfg = device_config()
        report["config"] = dataclasses.asdict(cfg)
        report["cases"], report["skipped"] = [], []
        small = not gpu_run
        dims = dict(H=8, KVH=2, Dh=64, min_pool_bytes=0) if small else None
        for i, (kind, params) in enumerate(timing_cases(args.quick, small=small)):
            if time.perf_counter() - start > args.budget_s:
                report["skipped"].append([kind, params])
                continue
            report["cases"].append(run_case(kind, params, jax.random.fold_in(key, 1000 + i), cfg,
                                            args.reps if gpu_run else 1, log,
                                            interpret=not gpu_run, dims=dims))
    report["elapsed_s"] = time.perf_counter() - start
    jpath, mpath = write_report(report, args.out)
    log(f"wrote {jpath} and {mpath}")
    if failed:
        log(f"{len(failed)} check(s) FAILED: no timings taken")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Batches, and the timing loop, for benchmarks that time the engine's tick program directly
(`pipeline_step.make_step`).

  spec "dN" / "dN@C" / "pN" / "pN@C" --tick_batch--> (stacked ModelInputs, feed_index, prev_tokens, pages)
  model config --per_layer_params--> (mesh, params as one CPU stage runs them)
  {name: (params, attention_fn, per_layer)} + a batch --time_ticks--> per program: compile seconds,
      first logits, ms a tick in each of `rounds` interleaved rounds (KV cache donated and carried)
      --compared_row--> medians, each over the first program's, logits' largest difference from its
      --comparison_table--> the results file's table   (`compare_batches`: every batch of a list, printed;
                                                         `write_comparison`: the report with it, written)

dN: N decoding sequences, one token each at C positions of context (default 544, the offline
job's middle), each sequence on its own run of pages; pN: one N-token prefill chunk at position 0,
pN@C: after C cached tokens (the cache's values are whatever the pool holds; the time is the same).
Tokens, sequence slots and page-table columns are padded as the engine buckets them (powers of
two, at least the default smallest buckets): one decode runs in 4 sequence slots and 16 token
slots, as it does when served (unpadded, one slot ran the tick ~6x slower than the same decode in
four slots on XLA:CPU, 791 vs 137 ms at 16384 keys). Shared by `per_layer_weights.py`,
`decode_block_keys.py` and `xla_key_splits.py`.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from medha_jax.model import init_kv_cache, make_inputs
from results_io import provenance, run_info, write_results
from medha_jax.model.pipeline_step import make_step

PAGE, CONTEXT = 16, 544
MIN_TOKENS, MIN_SEQS, MIN_PAGES = 16, 4, 8  # EngineConfig's smallest buckets


def _bucket(n: int, least: int) -> int:
    return max(least, 1 << max(n - 1, 0).bit_length())


def tick_batch(spec: str, page: int = PAGE):
    """spec -> (tick inputs with a leading stage axis, feed_index, prev_tokens, pages the batch needs)."""
    kind, (n_text, _, ctx_text) = spec[:1], spec[1:].partition("@")
    try:
        n, context = int(n_text), int(ctx_text) if ctx_text else CONTEXT
    except ValueError:
        n = context = 0
    if kind == "d" and n > 0 and context >= 0:
        per = -(-(context + 1) // page)
        seqs = [([300 + s], context, list(range(s * per, (s + 1) * per))) for s in range(n)]
    elif kind == "p" and n > 0 and context >= 0:
        context = context if ctx_text else 0
        seqs = [(list(range(256, 256 + n)), context, list(range(-(-(context + n) // page))))]
    else:
        raise ValueError(f"batch {spec!r}: want dN or dN@CONTEXT (decodes) or pN or pN@CONTEXT (a prefill chunk)")
    width, slots = max(len(s[2]) for s in seqs), _bucket(len(seqs), MIN_SEQS)
    inp = make_inputs(seqs, page, pad_tokens=_bucket(sum(len(s[0]) for s in seqs), MIN_TOKENS),
                      pad_seqs=slots, pad_pages=_bucket(width, MIN_PAGES))
    pages = sum(len(s[2]) for s in seqs)
    T = inp.token_ids.shape[-1]
    return jax.tree.map(lambda a: a[None], inp), -jnp.ones((1, T), jnp.int32), jnp.zeros((slots,), jnp.int32), pages


def time_ticks(programs: dict, spec: str, cfg, mesh, rounds: int, reps: int, page: int = PAGE) -> dict:
    """programs: {name: (params, attention_fn, per_layer)}, each compiled as the engine's one-stage
    tick over the batch `spec` with its own KV cache -> {name: dict(compile_s, logits (the first
    call's), ms: [ms a tick in each round])}; every round times each program over `reps` calls in
    turn (interleaved, so drifts in machine speed hit all alike)."""
    inp, feed, prev, pages = tick_batch(spec, page)
    steps, caches, res = {}, {}, {}
    for name, (params, attention, per_layer) in programs.items():
        caches[name] = init_kv_cache(cfg, mesh, pages, page, jnp.float32)
        t0 = time.perf_counter()
        steps[name] = jax.jit(make_step(cfg, mesh, attention, 1, per_layer), donate_argnums=(1, 2)).lower(
            params, *caches[name], None, inp, feed, prev).compile()
        compile_s = time.perf_counter() - t0
        out, *caches[name], _ = steps[name](params, *caches[name], None, inp, feed, prev)
        res[name] = dict(compile_s=compile_s, logits=np.asarray(out), ms=[])
    for _ in range(rounds):
        for name, (params, _, _) in programs.items():
            t0 = time.perf_counter()
            for _ in range(reps):
                out, *caches[name], _ = steps[name](params, *caches[name], None, inp, feed, prev)
            out.block_until_ready()
            res[name]["ms"].append((time.perf_counter() - t0) / reps * 1e3)
    return res


def per_layer_params(cfg):
    """The benchmark model's seeded random params on one device as the executor runs them on one CPU
    stage (per-layer buffers) -> (mesh, params)."""
    from medha_jax.mesh import make_mesh
    from medha_jax.model import sharding
    from medha_jax.model.init import init_params

    mesh = make_mesh({"tp": 1}, devices=jax.devices()[:1])
    return mesh, sharding.unstack_layers(init_params(cfg, mesh, seed=0), cfg, mesh)


def compare_batches(programs: dict, names: list, batches: str, cfg, mesh, rounds: int, label, prefill_reps: int = 2,
                    page: int = PAGE) -> list[dict]:
    """Every batch of the comma-separated `batches` timed over every program (`time_ticks`; 10 calls a
    round for decodes, `prefill_reps` for a prefill chunk) -> the report's rows (`compared_row`),
    each printed as it is measured; label(name): a program's name in the printed line."""
    rows = []
    for spec in batches.split(","):
        res = time_ticks(programs, spec, cfg, mesh, rounds, reps=10 if spec[0] == "d" else prefill_reps, page=page)
        rows.append(compared_row(spec, res, names))
        med, first = rows[-1]["median_ms"], str(names[0])
        print(f"{spec}: " + ", ".join(f"{label(n)} {med[str(n)]:.2f} ms ({med[str(n)] / med[first]:.2f}x)"
                                      for n in names), flush=True)
    return rows


def write_comparison(out, name: str, script: str, argv, load_before, rows: list[dict], names: list, label,
                     title: str, description: str, **fields) -> None:
    """compare_batches' rows -> results/NAME.json (run info, the device, `fields`, the rows) and NAME.md
    (`# {title} (XLA:PLATFORM, device)`, the provenance line and `description`, the comparison table);
    name may hold `{platform}`."""
    platform = jax.devices()[0].platform
    report = dict(run_info(script, argv, load_before), device=str(jax.devices()[0].device_kind), **fields, rows=rows)
    lines = [f"# {title} (XLA:{platform.upper()}, {report['device']})", "", f"{provenance(report)} {description}", ""]
    lines += comparison_table(rows, names, label)
    write_results(out, name.format(platform=platform), report, lines)


def compared_row(spec: str, res: dict, names: list) -> dict:
    """time_ticks' result for one batch -> the report's row: each program's median ms a tick, its
    ratio to the first program's, its logits' largest difference from the first's, every round."""
    med = {n: statistics.median(res[n]["ms"]) for n in names}
    first = names[0]
    return dict(batch=spec, median_ms={str(n): med[n] for n in names},
                vs_first={str(n): med[n] / med[first] for n in names},
                max_abs_diff={str(n): float(np.max(np.abs(res[n]["logits"] - res[first]["logits"]))) for n in names},
                rounds_ms={str(n): res[n]["ms"] for n in names})


def comparison_table(rows: list[dict], names: list, label) -> list[str]:
    """compared_row rows -> markdown table lines; label(name): a program's column name."""
    lines = ["| batch | " + " | ".join(f"{label(n)} (ms a tick)" for n in names) + " | "
             + " | ".join(f"{n} / {names[0]}" for n in names[1:]) + " | logits max abs diff |",
             "|---|" + "---|" * (2 * len(names))]
    for r in rows:
        lines.append(f"| {r['batch']} | " + " | ".join(f"{r['median_ms'][str(n)]:.2f}" for n in names) + " | "
                     + " | ".join(f"{r['vs_first'][str(n)]:.2f}x" for n in names[1:]) + " | "
                     + f"{max(r['max_abs_diff'].values()):.1e} |")
    return lines

"""Measure iteration times on the real executor and fit the runtime predictor to them.

  composition grid (prefill chunks x KV lengths, decode batches x KV lengths, hybrids)
    -> synthetic StepInput over scratch pages of the (idle) KV cache
    -> each composition's own bucket compiled (part of start-up, not counted as a serving compile)
    -> Executor.execute (the same compiled step that serves): one warm-up pass, then `repeats`
       shuffled rounds over every composition, each small one timed right after an untimed run of
       its own (SETTLE_BELOW), median per composition (`measure`; every timing: `measure_all`; with
       a stream pipeline: steady-state ticks, every stage holding the composition)
    -> samples [(Composition, seconds)] -> RuntimePredictor.fit with the executor's attention
       tiling (page size, smallest buckets); held-out MAPE by 5-fold cross-validation
    -> profile JSON keyed by (model, mesh, dtype, device), holding the tiling it was measured with
`get_predictor` reads that profile at start-up, measures a quick one when there is none, or, in
batch mode, starts on a provisional one (`medha_jax.nominal_profile`) without measuring.

Only run on an executor that is not serving: it overwrites KV pages.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterable

from medha_jax.scheduler import Composition, RuntimePredictor
from medha_jax.scheduler.attention_tiling import DEFAULT_TILING, Tiling
from medha_jax.scheduler.predictor import StaleProfileError
from medha_jax.step_input import SeqInput, StepInput


def composition_grid(max_tokens: int, max_seqs: int, max_kv: int, *, quick: bool = False,
                     seed: int = 0) -> list[Composition]:
    """Prefill-only, decode-only and hybrid compositions spanning the serving range."""
    rng = random.Random(seed)
    chunks = [c for c in (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192) if c <= min(max_tokens, max_kv)]
    chunks = chunks or [min(max_tokens, max_kv)]  # a token budget or context under 16 tokens
    kvs = sorted({0, *(k for k in (64, 256, 1024, 4096, 16384, 65536) if k < max_kv), max_kv // 2})
    decode_batches = [d for d in (1, 2, 4, 8, 16, 32, 64, 128, 256) if d <= min(max_seqs, max_tokens)]
    comps: list[Composition] = []
    for c in chunks:
        for kv in kvs:
            if c + kv <= max_kv:
                comps.append(Composition.of([(c, kv)]))
    for d in decode_batches:
        for kv in kvs[1:]:
            comps.append(Composition.of([(1, kv)] * d))
    n_hybrid = 8 if quick else 40
    for _ in range(n_hybrid):
        d = rng.choice(decode_batches)
        c = rng.choice([c for c in chunks if c + d <= max_tokens] or [chunks[0]])
        kv = rng.choice([k for k in kvs if k + c <= max_kv])
        dkv = [rng.randint(1, max_kv - 1) for _ in range(min(d, max_seqs - 1))]
        comps.append(Composition.of([(c, kv)] + [(1, k) for k in dkv]))
    if quick:
        rng.shuffle(comps)
        comps = comps[: max(24, len(comps) // 3)]
    return comps


def in_few_buckets(comps: list[Composition], bucket_of, max_buckets: int) -> list[Composition]:
    """The compositions that fall in at most `max_buckets` shape buckets, so that measuring them
    compiles few programs: per token size the bucket holding the most compositions (the model's
    token terms need every size), then the fullest remaining buckets. bucket_of: composition -> bucket."""
    by_bucket: dict = {}
    for c in comps:
        by_bucket.setdefault(bucket_of(c), []).append(c)
    fullest = sorted(by_bucket, key=lambda b: (-len(by_bucket[b]), b.tokens, b.seqs, b.pages))
    chosen: list = []
    for tokens in sorted({b.tokens for b in by_bucket}):
        chosen.append(next(b for b in fullest if b.tokens == tokens))
    chosen = chosen[:max_buckets]
    chosen += [b for b in fullest if b not in chosen][: max_buckets - len(chosen)]
    keep = set(chosen)
    return [c for c in comps if bucket_of(c) in keep]


def composition_bucket(ladders, page_size: int, comp: Composition):
    """The shape bucket a composition runs in (each sequence's page table covers its q + kv tokens)."""
    return ladders.pick(comp.num_tokens, len(comp.seqs), max(-(-(q + kv) // page_size) for q, kv in comp.seqs))


def profile_max_kv(executor, max_model_len: int) -> int:
    """Longest context a profiled composition may have: the model's limit, the largest page-table
    bucket, and one kvp group's pages (synthetic batches live on group 0's scratch pages)."""
    ps = executor.page_size
    return min(max_model_len, executor.ladders.pages[-1] * ps, executor.total_pages // executor.kvp * ps)


def synthetic_batch(comp: Composition, page_size: int, group_pages: int, vocab_size: int) -> StepInput:
    """A step with the given composition whose sequences share scratch pages of kvp group 0
    (values don't matter); group_pages: the pages one kvp group holds."""
    seqs = []
    for i, (q, kv) in enumerate(comp.seqs):
        n_pages = -(-(q + kv) // page_size)
        if n_pages > group_pages:
            raise ValueError(f"composition needs {n_pages} pages per sequence, a kvp group has {group_pages}")
        tokens = tuple((7 * i + j) % vocab_size for j in range(kv, q + kv))
        seqs.append(SeqInput(request_id=f"profile-{i}", start_pos=kv, num_tokens=q, token_ids=tokens,
                             page_tables=(tuple(range(n_pages)),), samples=True, temperature=0.0, top_k=0,
                             top_p=1.0, seed=0, step=0))
    return StepInput(tuple(seqs))


SETTLE_BELOW = 0.25
"""Seconds under which a composition runs once untimed before each timed run (`measure_all`). On the
2-core VM one small decode iteration (2 decodes at 256 keys, the convoy's engine) took 14.5 ms right
after a 2K-token chunk over 16K keys, 4.7 ms after that chunk and one run of its own, 5.0 ms back to
back (`benchmarks/results/profile_settle_cpu.md`). Timed in the shuffled order alone, the convoy
grid's iterations under 20 ms that followed one over 1 s ran at a median 3.5x their fastest time,
the median of the first half of seven repeats disagreed with the second half's by 15.7% on average
(30.6% on decode-only iterations), and the profile's held-out error was 13.4-13.9%; settled: 1.35x,
6.8% (9.1%), 9.1-9.5%. An iteration over 0.25 s pays the same ~10 ms as a few percent, and those
dominate the profile's time, so they are timed once per round (the grid took 471 s, 439 s without
settling)."""


def measure(executor, comps: Iterable[Composition], *, vocab_size: int, repeats: int = 3,
            progress: bool = True, seed: int = 0) -> list[tuple[Composition, float]]:
    """Median seconds per composition of `measure_all`'s timings."""
    return [(c, statistics.median(ts)) for c, ts in measure_all(executor, comps, vocab_size=vocab_size,
                                                                 repeats=repeats, progress=progress, seed=seed)]


def measure_all(executor, comps: Iterable[Composition], *, vocab_size: int, repeats: int = 3,
                progress: bool = True, seed: int = 0) -> list[tuple[Composition, list[float]]]:
    """Seconds of each timed run per composition, in round order. Every composition runs once untimed
    first (compiles and warms its bucket), then `repeats` rounds each time every composition once in
    a shuffled order: noise that lasts a while (another process, a frequency change, memory settling
    after a compile) spreads over all compositions instead of biasing the few timed during it. A
    composition that ran under SETTLE_BELOW seconds in the first pass runs once more, untimed, just
    before each timed run, so the timed run pays for its own work and not for what the composition
    before it left behind (`SETTLE_BELOW` says how much that was)."""
    comps = list(comps)
    group_pages = executor.total_pages // executor.kvp
    batches = [synthetic_batch(c, executor.page_size, group_pages, vocab_size) for c in comps]
    for b in dict.fromkeys(composition_bucket(executor.ladders, executor.page_size, c) for c in comps):
        executor.compile_bucket(b)  # each composition timed in its own bucket, not padded into a compiled one
    pipelined = getattr(executor, "depth", 1) > 1
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(comps) * (1 + repeats), desc="profiling iterations", unit="batch")

    def run(i: int) -> float:
        if pipelined:
            return _tick_time(executor, batches[i])
        t0 = time.perf_counter()
        executor.execute(batches[i])  # returns host arrays, so the device work is done
        return time.perf_counter() - t0

    first = [0.0] * len(comps)
    times: list[list[float]] = [[] for _ in comps]
    for rnd, order in enumerate(round_orders(len(comps), 1 + repeats, seed)):  # round 0: warm, not kept
        for i in order:
            if rnd == 0:
                first[i] = run(i)
            else:
                if not pipelined and first[i] < SETTLE_BELOW:  # (a pipelined tick follows its own fills)
                    run(i)  # settle: the timed run below follows its own composition
                times[i].append(run(i))
            if bar is not None:
                bar.update()
    if bar is not None:
        bar.close()
    return list(zip(comps, times))


def round_orders(n: int, rounds: int, seed: int = 0) -> list[list[int]]:
    """The order `measure_all` runs n compositions in, round by round (a seeded shuffle per round)."""
    rng = random.Random(seed)
    orders = []
    for _ in range(rounds):
        order = list(range(n))
        rng.shuffle(order)
        orders.append(order)
    return orders


def _tick_time(executor, batch) -> float:
    """Stream pipeline (spp > 1): an iteration is one tick, and the scheduler's budget is per
    tick, so time a tick in the steady state where every stage holds this composition (the batch
    fed on every tick), then drain the pipeline."""
    for _ in range(executor.depth):  # fill (the first tick pays any compile)
        executor.tick(batch)
    t0 = time.perf_counter()
    executor.tick(batch)  # returns the exiting batch's host arrays: the tick is done
    t = time.perf_counter() - t0
    while not executor.idle:
        executor.tick(None)
    return t


def fit_with_holdout(samples, *, folds: int = 5, seed: int = 0, key=None, tiling: Tiling = DEFAULT_TILING):
    """k-fold cross-validation: every sample is predicted once by a fit that never saw it.
    Returns (predictor refit on all samples, mean held-out MAPE over every sample); `tiling`: the
    attention loop shapes of the engine that measured them (`Tiling.for_executor`)."""
    rng = random.Random(seed)
    idx = list(range(len(samples)))
    rng.shuffle(idx)
    folds = max(2, min(folds, len(samples) // 2))
    errs = 0.0
    for k in range(folds):
        test = [samples[i] for i in idx[k::folds]]
        train = [samples[i] for j, i in enumerate(idx) if j % folds != k]
        errs += RuntimePredictor.fit(train, key=key, tiling=tiling).mape(test) * len(test)
    return RuntimePredictor.fit(samples, key=key, tiling=tiling), errs / len(samples)


QUICK_PROFILE_BUCKETS = 9
"""Shape buckets the start-up profile compiles and measures in (each costs a compile before serving)."""


def get_predictor(engine_config, scheduler_config, executor, key, vocab_size: int, max_model_len: int):
    """The profile for `key` from engine_config.profile_dir; for a time-budget policy with none on
    disk, measure a quick one now (and save it): the compositions of the full grid that fall in
    QUICK_PROFILE_BUCKETS buckets (`in_few_buckets`), except in batch mode, where no iteration has a
    time budget: there the provisional predictor of `nominal_profile` (the model's arithmetic over
    this device's measured matmul and memory rates, ~1 s) stands in for it, and nothing is saved.
    fcfs without a profile runs with no predictor."""
    import logging
    import os

    from medha_jax.scheduler.predictor import profile_path

    log = logging.getLogger(__name__)
    path = profile_path(os.path.expanduser(engine_config.profile_dir), key)
    tiling = Tiling.for_executor(executor)
    if os.path.exists(path):
        try:
            return RuntimePredictor.load(path, expect=key, tiling=tiling)
        except StaleProfileError as e:  # an older release's, or other engine shapes': its coefficients mean other work
            if not scheduler_config.uses_time_budget:
                return None
            log.warning("%s; it will be measured again", e)
    if not scheduler_config.uses_time_budget:
        return None
    if scheduler_config.batch_mode:
        from medha_jax.model import sharding
        from medha_jax.nominal_profile import nominal_predictor

        lay = sharding.layout(executor.cfg, executor.mesh)
        log.info("no runtime profile at %s; batch mode runs on a provisional predictor (the model's arithmetic "
                 "over this device's matmul and memory rates); a server, or `python -m medha_jax.profile`, "
                 "measures one", path)
        return nominal_predictor(executor.cfg, key, tiling, tp=lay.tp, spp=lay.spp, dtype=engine_config.dtype,
                                 kv_dtype=engine_config.kv_cache_dtype, backend=executor.attention_backend)
    log.warning("no usable runtime profile at %s; measuring a quick one", path)
    ladders = executor.ladders
    comps = composition_grid(ladders.tokens[-1], ladders.seqs[-1],
                             profile_max_kv(executor, max_model_len))
    comps = in_few_buckets(comps, lambda c: composition_bucket(ladders, executor.page_size, c), QUICK_PROFILE_BUCKETS)
    samples = measure(executor, comps, vocab_size=vocab_size, repeats=2)
    predictor, held_out = fit_with_holdout(samples, key=key, tiling=tiling)
    predictor.fit_info["held_out_mape"] = held_out
    predictor.fit_info["quick"] = True
    predictor.save(path, samples)
    return predictor

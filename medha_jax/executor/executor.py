"""Executor: StepInput -> padded device arrays -> one compiled pipeline tick -> sampled tokens.

Owns the device state (params, the donated paged KV cache, the pipeline activations), one
ahead-of-time compiled tick per shape bucket and one sampler per sequence count (a bucket's
compile includes its sampler's when that is new). `warmup()` compiles every bucket (with a
progress bar), or with `background=True` only the bucket every batch fits before returning and the
rest in a background thread (`background_compile`): until a tick's own bucket is ready it runs
padded in the cheapest compiled bucket that holds it, or waits for its own bucket's compile where
the last tick padded there took longer than a compile (`runnable`). After warm-up a tick that
finds no compiled bucket holding it is compiled on the spot and counted in
`compiles_after_warmup`, and every XLA compile in the process is counted by `compile_events` (a
jax.monitoring listener), so tests can assert a running engine compiles nothing. Each compile
first asks the process's memory-mapping budget (`map_budget`): a compile that would pass the
kernel's limit raises MappingLimitError instead of crashing the process, and from then on ticks
run padded in compiled buckets where one holds them.

    tick(step | None) -> (step leaving the last stage | None, its StepResult | None)
        pack the new step (a self-contained `StepInput` snapshot) at its own bucket -> PipelineSlots.plan (rows stacked per stage)
        -> [multi-host leader: broadcast the tick's arrays] -> compiled tick
           (model.pipeline_step.make_step: every stage runs its microbatch, activations move one
           stage on) -> logits -> compiled sampler (make_sampler: the last stage's microbatch is
           sampled)
    execute(step) -> StepResult: one step through the whole pipeline (idle pipeline only);
        with spp == 1 a tick is exactly one execute, and tick() calls execute().
    launch(step) -> Launched (spp == 1): the step started, not waited for; `result()` waits. A
        step's pending tokens (`SeqInput.feed`) are read on the device from the samples of the
        step launched before it, so the engine can form and launch step n+1 while step n runs.

Depth (spp) 1 is the plain loop. Any multi-device program here runs on every process of a
multi-host mesh in the same order: a leader executor (channel set) broadcasts each device
operation before running it, followers replay them (`executor.multihost.follow`).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from medha_jax.executor.background_compile import BackgroundCompiler, bucket_cost
from medha_jax.executor.buckets import Bucket, BucketLadders
from medha_jax.executor.device_timeline import DeviceTimeline
from medha_jax.executor.host_swap import HostSwap
from medha_jax.executor.map_budget import BUDGET, MapBudget, MappingLimitError
from medha_jax.executor.packing import MODEL_FIELDS, SAMPLING_FIELDS, PackedBatch, pack_batch, specs
from medha_jax.executor.pipeline_slots import Microbatch, PipelineSlots, TickPlan, bucket_of
from medha_jax.executor.sampler import SamplingArrays, sample
from medha_jax.model import sharding
from medha_jax.model.inputs import ModelInputs, place
from medha_jax.model.pipeline_step import init_acts, make_sampler, make_step
from medha_jax.model.sharded_forward import init_kv_cache
from medha_jax.step_input import StepInput

_compile_lock = threading.Lock()
_compile_events = 0


def _on_event(event: str, duration: float, **_: object) -> None:
    global _compile_events
    if event == "/jax/core/compile/backend_compile_duration":
        with _compile_lock:
            _compile_events += 1


jax.monitoring.register_event_duration_secs_listener(_on_event)


def compile_events() -> int:
    """XLA backend compiles in this process so far (any jitted function, not only ours)."""
    return _compile_events


@dataclass
class StepResult:
    """Per logits row of the step (`StepInput.last_rows`: a sequence's sampling row)."""

    token_ids: np.ndarray  # i32[rows]: sampled token per row (valid at a sampling row)
    logprobs: np.ndarray  # f32[rows]: of the sampled token, or of the row's scoring target
    top_ids: np.ndarray  # i32[rows, K]: the K most likely tokens, most likely first
    top_logprobs: np.ndarray  # f32[rows, K]


@dataclass
class Launched:
    """A step started on the device; `result()` waits for it and copies its samples to the host."""

    tokens: jax.Array  # i32[kvp*max_seqs], replicated, in the step's row order
    logprobs: jax.Array  # f32[kvp*S], replicated
    top_ids: jax.Array  # i32[kvp*S, K], replicated
    top_logprobs: jax.Array  # f32[kvp*S, K], replicated
    n: int  # logits rows in the step
    timed: Callable[[float], None] | None = None  # told the seconds from launch to samples on the host
    t0: float = 0.0  # when it was launched (perf_counter)

    def result(self) -> StepResult:
        # Replicated outputs: every process reads its own copy.
        host = [np.asarray(a.addressable_data(0))[: self.n]
                for a in (self.tokens, self.logprobs, self.top_ids, self.top_logprobs)]
        if self.timed is not None:
            self.timed(time.perf_counter() - self.t0)
            self.timed = None
        return StepResult(*host)


class Executor:
    def __init__(self, cfg, params, mesh, *, total_pages: int, page_size: int, kv_dtype,
                 ladders: BucketLadders, attention_fn, group_tokens: int | None = None, channel=None,
                 host_slots: int = 0, layer_unroll: int = 1):
        """total_pages: global page count (kvp groups x pages per group); group_tokens: KV positions
        per kvp group (the KV manager's max_tokens_per_kvp_group; None: all on group 0);
        channel: a `multihost.Channel` when this is the leader of a multi-host mesh; host_slots:
        pages of host memory for the host KV tier (`swap`; single process only); layer_unroll:
        layers per iteration of the step's layer loop (`EngineConfig.layer_unroll`)."""
        lay = sharding.layout(cfg, mesh)
        self.cfg, self.params, self.mesh = cfg, params, mesh
        self.depth, self.kvp = lay.spp, lay.kvp
        self.total_pages, self.page_size, self.ladders = total_pages, page_size, ladders
        self.group_tokens = group_tokens
        self.attention_backend = getattr(attention_fn, "backend", "custom")
        self.kv_dtype = kv_dtype
        self.channel = channel
        self.kv_k, self.kv_v = init_kv_cache(cfg, mesh, total_pages, page_size, kv_dtype)
        if host_slots and jax.process_count() > 1:
            raise ValueError("the host KV tier (swap space) runs in one process only; set it to 0 on a multi-host mesh")
        self.host_swap = (HostSwap(host_slots, total_pages // self.kvp,
                                   jax.tree.map(lambda a: a.sharding, (self.kv_k, self.kv_v)))
                          if host_slots else None)
        self._acts_dtype = params["embed"].dtype
        self.acts = init_acts(cfg, mesh, ladders.tokens[-1], self._acts_dtype)
        self.pipe = PipelineSlots(self.depth, self.kvp)
        self.max_seqs = ladders.seqs[-1]
        # XLA:CPU copies a stacked layer's weights out of the stack in every layer of every step; on
        # one stage the step reads per-layer buffers instead (`sharding.unstack_layers`). Not on a
        # GPU: there the layer loop would launch a conditional per projection.
        self.on_cpu = mesh.devices.flat[0].platform == "cpu"
        per_layer = self.depth == 1 and self.on_cpu
        if per_layer:
            self.params = sharding.unstack_layers(params, cfg, mesh)
        self._step = jax.jit(make_step(cfg, mesh, attention_fn, layer_unroll, per_layer), donate_argnums=(1, 2, 3))
        self._sample = jax.jit(make_sampler(mesh, sample, self.max_seqs))
        specs = sharding.input_specs(stacked=True)
        self._shardings = {f: NamedSharding(mesh, getattr(specs, f)) for f in MODEL_FIELDS}
        self._shardings.update({f: NamedSharding(mesh, sharding.SAMPLING_SPEC) for f in (*SAMPLING_FIELDS, "feed_index")})
        self._shardings["out_rows"] = NamedSharding(mesh, P())
        self._prev_tokens = self._zero_tokens()  # i32[kvp*max_seqs]: the last tick's samples, on the device
        self.timeline: DeviceTimeline | None = None  # set to record when each tick ran (benchmarks)
        self._multiprocess = jax.process_count() > 1
        self._compiled: dict[Bucket, object] = {}  # written by the engine thread and the background compiler
        self._samplers: dict[int, object] = {}  # per sequence count (a bucket's seqs); the same writers
        self.background: BackgroundCompiler | None = None
        self.warmed_up = False
        self.compiles_after_warmup = 0
        self.padded_ticks = 0  # ticks run in a larger bucket while theirs was compiling
        self.compile_waits = 0  # ticks that waited for their own bucket's compile instead (`runnable`)
        self.tick_seconds: dict[Bucket, float] = {}  # the last tick run in each bucket: launch to samples on the host
        self.compile_seconds: list[float] = []  # every bucket compile's duration
        # seconds a tick padded into a bucket is predicted to take before one has run there (set by
        # engine_builder from the scheduler's predictor; None: only measured ticks count)
        self.padded_estimate: Callable[[Bucket], float] | None = None
        self._ticks_open = 0  # launched, their seconds not yet recorded (`busy`)
        self._last_tick_event = float("-inf")  # perf_counter of the last launch or completion
        self.num_buckets = len(ladders.all_buckets())
        self.maps: MapBudget = BUDGET  # the process's memory mappings, shared by its executors

    # ---- compilation -------------------------------------------------------------------
    def _abstract_args(self, b: Bucket):
        i32, sd = jnp.int32, jax.ShapeDtypeStruct
        n, g = self.depth, self.kvp
        T, S = b.tokens, b.seqs
        inp = ModelInputs(
            token_ids=sd((n, g, T), i32), positions=sd((n, g, T), i32),
            slot_mapping=sd((n, g, g, T), i32), cu_q_lens=sd((n, g, S + 1), i32),
            q_offsets=sd((n, g, g, S), i32), kv_lens=sd((n, g, g, S), i32),
            page_table=sd((n, g, g, S, b.pages), i32), logits_indices=sd((n, g, S), i32),
        )
        return self.params, self.kv_k, self.kv_v, self.acts, inp, sd((g, T), i32), self._prev_tokens

    def _abstract_sample_args(self, S: int):
        f32, i32, sd = jnp.float32, jnp.int32, jax.ShapeDtypeStruct
        g = self.kvp
        logits = sd((self.depth, g, S, self.cfg.vocab_size), f32, sharding=NamedSharding(self.mesh, sharding.LOGITS_SPEC))
        samp = SamplingArrays(sd((g, S), f32), sd((g, S), i32), sd((g, S), f32),
                              sd((g, S), jnp.uint32), sd((g, S), i32), sd((g, S), i32))
        return logits, samp, sd((g * S,), i32)

    def compile_bucket(self, b: Bucket):
        """The tick's executable for bucket b and the sampler's for its sequence count, compiled
        now unless they already are; returns the tick's. Raises MappingLimitError (nothing
        compiled) when one more would pass the process's limit on memory mappings (`map_budget`)."""
        exe = self._compiled.get(b)
        if exe is None:
            before = self.maps.check(1)
            if b.seqs not in self._samplers:
                self._samplers[b.seqs] = self._sample.lower(*self._abstract_sample_args(b.seqs)).compile()
            t0 = time.perf_counter()
            exe = self._step.lower(*self._abstract_args(b)).compile()
            self.compile_seconds.append(time.perf_counter() - t0)
            self.maps.record(before)
            self._compiled[b] = exe
        return exe

    def _compile(self, b: Bucket):
        """compile_bucket for a tick about to run (a compile here after warm-up is counted)."""
        if self.warmed_up and b not in self._compiled:
            self.compiles_after_warmup += 1
        return self.compile_bucket(b)

    def runnable(self, b: Bucket) -> Bucket:
        """The bucket a tick that needs b runs in: b once compiled; while the background compiler
        is running, b is compiled next in the background and the tick runs padded in the cheapest
        compiled bucket holding b, unless the last tick there (or, before any, the margin times its
        predicted tick: `_padded_seconds`) took longer than a bucket's compile (`_wait_for`: then it
        waits up to that long for b instead); the same, for good, once a
        compile was refused for the process's memory-mapping limit (`map_budget`); b itself
        (compiled on the spot) when none holds it."""
        if b in self._compiled:
            return b
        compiling = self.background is not None and not self.background.finished
        if not compiling and not self.maps.refused and self.maps.fits(1):
            return b
        holders = [c for c in tuple(self._compiled)
                   if c.tokens >= b.tokens and c.seqs >= b.seqs and c.pages >= b.pages]
        if not holders:
            return b
        holder = min(holders, key=bucket_cost)
        if compiling:
            self.background.want(b)
            if self._wait_for(b, self._padded_seconds(holder)):
                self.compile_waits += 1
                return b
        self.padded_ticks += 1
        return holder

    PADDED_ESTIMATE_MARGIN = 2.0
    """A holder no tick has run in yet counts as this many times its predicted padded tick: the
    prediction prices the padding's rows at the matmuls' measured rate, which a padded tick does not
    reach (the 31M Llama's 16,384-token cover bucket: predicted 4.1-5.2 s, ran 7.6 s alone and
    15.7-18.7 s beside background compiles on a 2-core Zen 4 VM)."""

    def _padded_seconds(self, holder: Bucket) -> float | None:
        """How long a tick padded into holder takes: its last tick's seconds, else the margin times
        `padded_estimate`'s, else None (unknown)."""
        seconds = self.tick_seconds.get(holder)
        if seconds is None and self.padded_estimate is not None:
            seconds = self.PADDED_ESTIMATE_MARGIN * self.padded_estimate(holder)
        return seconds

    def _wait_for(self, b: Bucket, padded: float | None) -> bool:
        """Wait for the background compiler to compile b (wanted, so next) when a tick padded into
        the bucket it would run in took `padded` seconds, more than the median compile: on a CPU a
        16-sequence decode step padded into the bucket every batch fits (8,448 tokens) took ~24 s
        where its own bucket compiles in ~5 s. Waits at most `padded` seconds (never much longer
        than running padded would have taken); True once b is compiled."""
        if padded is None or not self.compile_seconds or padded <= statistics.median(self.compile_seconds):
            return False
        deadline = time.perf_counter() + padded
        while b not in self._compiled:
            if self.background.finished or time.perf_counter() > deadline:
                return False
            time.sleep(0.01)
        return True

    def precompile(self, buckets) -> int:
        """Compile these buckets now (a caller that knows its shapes warms up only those);
        returns how many were new. Counted in compiles_after_warmup once warmed up."""
        new = [b for b in dict.fromkeys(buckets) if b not in self._compiled]
        for b in new:
            self._compile(b)
        return len(new)

    EAGER_BUCKETS = 64
    """With a background compiler: buckets compiled unasked (the cheapest); the others when first needed."""

    def warmup(self, progress: bool = True, background: bool = False) -> int:
        """Compile every bucket (background=False), or only the one every batch fits and prepare
        a background compiler for the others (background=True; `start_background` starts it once
        start-up profiling, which must not share the device with compiles, is over: the
        EAGER_BUCKETS cheapest at once (on a CPU, in the ticks' pauses: `busy`), the rest when a
        tick first needs them); returns how many
        buckets were compiled. Shows a progress bar when asked."""
        buckets = self.ladders.all_buckets()
        if background:
            l = self.ladders
            cover = Bucket(l.tokens[-1], l.seqs[-1], l.pages[-1])
            self.compile_bucket(cover)
            self.warmed_up = True
            rest = [b for b in buckets if b not in self._compiled]
            # on a CPU compiles and ticks share the cores: the eager buckets wait for the ticks' pauses
            self.background = BackgroundCompiler(self, rest, eager=self.EAGER_BUCKETS,
                                                 busy=self.busy if self.on_cpu else None)
            return 1
        self.maps.check(len(buckets) - len(self._compiled))  # refuse now, not after minutes of compiling
        it = buckets
        if progress:
            from tqdm import tqdm

            it = tqdm(buckets, desc="compiling shape buckets", unit="bucket")
        for b in it:
            self.compile_bucket(b)
        self.warmed_up = True
        return len(buckets)

    def start_background(self) -> None:
        """Start the background compiler that warmup(background=True) prepared (if any)."""
        if self.background is not None:
            self.background.start()

    def wait_compiled(self, timeout: float | None = None) -> bool:
        """Block until the background compiler (if any) has nothing left to compile."""
        return self.background is None or self.background.wait(timeout)

    def close(self) -> None:
        """Stop the background compiler at its next bucket."""
        if self.background is not None:
            self.background.stop()

    # ---- device state ------------------------------------------------------------------
    def kv_cache_lost(self) -> bool:
        """True when a failed step consumed the donated cache buffers."""
        return any(a.is_deleted() for a in jax.tree.leaves((self.kv_k, self.kv_v)))

    def swap(self, ops) -> None:
        """Run the host tier's page copies (`HostPageStore.take_ops`) before the next step."""
        if not ops:
            return
        if self.host_swap is None:
            raise RuntimeError("page copies to or from host memory, but this executor has no host KV tier")
        self.kv_k, self.kv_v = self.host_swap.apply(ops, self.kv_k, self.kv_v)

    def forget_swaps(self) -> None:
        """The host tier was cleared: drop its copies still on their way to host memory."""
        if self.host_swap is not None:
            self.host_swap.clear()

    def reset_kv_cache(self) -> None:
        """A fresh zero cache (every request that had KV must recompute it)."""
        self._send("reset_kv")
        self.kv_k, self.kv_v = init_kv_cache(self.cfg, self.mesh, self.total_pages, self.page_size, self.kv_dtype)

    def reset_pipeline(self) -> None:
        """Forget every microbatch in flight (after a failed tick) and zero the activations."""
        self._send("reset_pipeline")
        self.pipe.clear()
        self.acts = init_acts(self.cfg, self.mesh, self.ladders.tokens[-1], self._acts_dtype)
        self._prev_tokens = self._zero_tokens()

    def _zero_tokens(self) -> jax.Array:
        return jax.device_put(np.zeros(self.kvp * self.max_seqs, np.int32), NamedSharding(self.mesh, P()))

    def _send(self, op: str, arrays: dict[str, np.ndarray] | None = None) -> None:
        if self.channel is not None:
            self.channel.send(op, arrays)

    # ---- execution ---------------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """No microbatch is in the pipeline (always true with spp == 1 between ticks)."""
        return self.pipe.is_empty

    def pack(self, step: StepInput) -> PackedBatch:
        slots = None
        if self.kvp == 1:
            tokens, rows = step.num_tokens, step.num_rows
        else:  # a bucket is per group: the busiest group's batch decides it
            slots = place(specs(step), self.kvp, self.group_tokens)
            tokens, rows = [0] * self.kvp, [0] * self.kvp
            for s, (g, _) in zip(step.seqs, slots):
                tokens[g] += s.num_tokens
                rows[g] += s.num_rows
            tokens, rows = max(tokens), max(rows)
        bucket = self.ladders.pick(tokens, rows, step.max_pages)  # rows >= sequences
        return pack_batch(step, bucket, self.page_size, kvp=self.kvp, group_tokens=self.group_tokens, slots=slots)

    def tick(self, step: StepInput | None):
        """Feed `step` (None: nothing new) to stage 0 and advance the pipeline one tick.

        Returns (the step that left the last stage, its StepResult), or (None, None) when none
        did. Raises what the step raises; the caller then calls `reset_pipeline`."""
        if self.depth == 1:
            return (step, self.execute(step)) if step is not None else (None, None)
        return self._advance(step)

    def execute(self, step: StepInput) -> StepResult:
        """Run one step through every stage and return its sampled tokens (pipeline idle)."""
        if not self.pipe.is_empty:
            raise RuntimeError("execute() needs an idle pipeline; use tick() while batches are in flight")
        if self.depth == 1:
            return self.launch(step).result()
        done, result = self._advance(step)
        while done is None:
            done, result = self._advance(None)
        return result

    def launch(self, step: StepInput) -> Launched:
        """Start one step (spp == 1) and return at once: the device runs it while the host goes on
        (XLA dispatch is asynchronous). Its pending tokens (`SeqInput.feed`) read the samples of the
        step launched before it, which may still be running. `Launched.result()` waits."""
        if self.depth != 1:
            raise RuntimeError("launch() runs one step of a one-stage pipeline; use tick() with spp > 1")
        plan = self.pipe.plan(Microbatch(step, self.pack(step)), self.runnable)
        self._send("run", plan.arrays)
        t0 = time.perf_counter()
        return Launched(*self.launch_arrays(plan.arrays), step.num_rows, self._timer(bucket_of(plan.arrays)), t0)

    def _advance(self, step: StepInput | None):
        new = Microbatch(step, self.pack(step)) if step is not None and step.seqs else None
        plan = self.pipe.plan(new, self.runnable)
        if plan is None:
            return None, None
        self._send("run", plan.arrays)
        t0 = time.perf_counter()
        arrays = self.launch_arrays(plan.arrays)
        self.pipe.commit(plan)
        out = plan.exiting
        if out is None:
            return None, None
        return out.batch, Launched(*arrays, out.batch.num_rows, self._timer(bucket_of(plan.arrays)), t0).result()

    def _timer(self, b: Bucket) -> Callable[[float], None]:
        """Records a tick's seconds in bucket b (`tick_seconds`; `runnable` reads them), and that
        a tick is in flight meanwhile (`busy`). Called at launch."""
        self._ticks_open += 1
        self._last_tick_event = time.perf_counter()

        def timed(seconds: float) -> None:
            self.tick_seconds[b] = seconds
            self._ticks_open -= 1
            self._last_tick_event = time.perf_counter()
        return timed

    BUSY_PAUSE_S = 0.5
    """`busy` until this long after the last tick ended: gaps between an offline job's ticks are ms."""
    BUSY_STALE_S = 120.0
    """A tick in flight counts as busy for at most this long (one whose result is never read)."""

    def busy(self) -> bool:
        """Ticks are running: one is in flight, or one ended less than BUSY_PAUSE_S ago. On a CPU the
        background compiler's eager buckets wait while this holds."""
        quiet = time.perf_counter() - self._last_tick_event
        return quiet < self.BUSY_PAUSE_S or (self._ticks_open > 0 and quiet < self.BUSY_STALE_S)

    def run_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """One tick on a `TickPlan.arrays` dict, waited for (a multi-host follower's replay)."""
        self.launch_arrays(arrays)[0].block_until_ready()

    def launch_arrays(self, arrays: dict[str, np.ndarray]) -> tuple[jax.Array, ...]:
        """Start one compiled tick on a `TickPlan.arrays` dict; the only place the step runs.
        Returns its (tokens i32[kvp*max_seqs], logprobs f32[kvp*S], top ids i32[kvp*S, K], top
        logprobs f32[kvp*S, K]) on the device in the step's row order, not waited for."""
        b = bucket_of(arrays)
        exe = self._compile(b)
        put = self._global if self._multiprocess else (lambda a, f: a)
        inp = ModelInputs(**{f: put(arrays[f], f) for f in MODEL_FIELDS})
        samp = SamplingArrays(*(put(arrays[f], f) for f in SAMPLING_FIELDS))
        t0 = time.perf_counter()
        logits, self.kv_k, self.kv_v, self.acts = exe(self.params, self.kv_k, self.kv_v, self.acts, inp,
                                                      put(arrays["feed_index"], "feed_index"), self._prev_tokens)
        tokens, logprobs, top_ids, top_lps = self._samplers[b.seqs](logits, samp, put(arrays["out_rows"], "out_rows"))
        self._prev_tokens = tokens
        if self.timeline is not None:
            self.timeline.launched(t0, tokens)
        return tokens, logprobs, top_ids, top_lps

    def _global(self, a: np.ndarray, field: str) -> jax.Array:
        """A host array every process holds whole -> a global array in the field's sharding."""
        return jax.make_array_from_callback(a.shape, self._shardings[field], lambda idx: a[idx])


__all__ = ["Executor", "Launched", "MappingLimitError", "StepResult", "TickPlan", "compile_events"]

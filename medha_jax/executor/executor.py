"""Executor: ScheduledBatch -> padded device arrays -> one compiled step -> sampled tokens.

Owns the device state (params, the donated paged KV cache) and one ahead-of-time compiled
executable per shape bucket. `warmup()` compiles every bucket (with a progress bar); after it a
batch that needs a new bucket is compiled on the spot and counted in `compiles_after_warmup`, and
every XLA compile in the process is counted by `compile_events` (a jax.monitoring listener), so
tests can assert a running engine compiles nothing.

step(params, kv_k, kv_v, inputs, sampling) = forward (shard_map over the mesh) -> sample,
jitted as one program, KV cache donated.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from medha_jax.batch import ScheduledBatch
from medha_jax.executor.buckets import Bucket, BucketLadders
from medha_jax.executor.packing import PackedBatch, max_pages_needed, pack_batch
from medha_jax.executor.sampler import SamplingArrays, sample
from medha_jax.model.inputs import ModelInputs
from medha_jax.model.sharded import init_kv_cache, make_forward

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
    token_ids: np.ndarray  # i32[num_seqs]: sampled token per scheduled sequence (valid where it samples)
    logprobs: np.ndarray  # f32[num_seqs]


class Executor:
    def __init__(self, cfg, params, mesh, *, num_pages: int, page_size: int, kv_dtype,
                 ladders: BucketLadders, attention_fn):
        self.cfg, self.params, self.mesh = cfg, params, mesh
        self.num_pages, self.page_size, self.ladders = num_pages, page_size, ladders
        self.attention_backend = getattr(attention_fn, "backend", "custom")
        self.kv_dtype = kv_dtype
        self.kv_k, self.kv_v = init_kv_cache(cfg, mesh, num_pages, page_size, kv_dtype)
        forward = make_forward(cfg, mesh, attention_fn)

        def step(params, kv_k, kv_v, inp: ModelInputs, samp: SamplingArrays):
            logits, kv_k, kv_v = forward(params, kv_k, kv_v, inp)  # logits: f32[S, V]
            tokens, logprobs = sample(logits, samp)
            return tokens, logprobs, kv_k, kv_v

        self._jitted = jax.jit(step, donate_argnums=(1, 2))
        self._compiled: dict[Bucket, object] = {}
        self.warmed_up = False
        self.compiles_after_warmup = 0

    # ---- compilation -------------------------------------------------------------------
    def _abstract_args(self, b: Bucket):
        i32, f32 = jnp.int32, jnp.float32
        sd = jax.ShapeDtypeStruct
        inp = ModelInputs(
            token_ids=sd((b.tokens,), i32), positions=sd((b.tokens,), i32), slot_mapping=sd((b.tokens,), i32),
            cu_q_lens=sd((b.seqs + 1,), i32), q_offsets=sd((b.seqs,), i32), kv_lens=sd((b.seqs,), i32),
            page_table=sd((b.seqs, b.pages), i32), logits_indices=sd((b.seqs,), i32),
        )
        samp = SamplingArrays(sd((b.seqs,), f32), sd((b.seqs,), i32), sd((b.seqs,), f32),
                              sd((b.seqs,), jnp.uint32), sd((b.seqs,), i32))
        return self.params, self.kv_k, self.kv_v, inp, samp

    def _compile(self, b: Bucket):
        exe = self._compiled.get(b)
        if exe is None:
            if self.warmed_up:
                self.compiles_after_warmup += 1
            exe = self._jitted.lower(*self._abstract_args(b)).compile()
            self._compiled[b] = exe
        return exe

    def warmup(self, progress: bool = True) -> int:
        """Compile every bucket; returns how many. Shows a progress bar when asked."""
        buckets = self.ladders.all_buckets()
        it = buckets
        if progress:
            from tqdm import tqdm

            it = tqdm(buckets, desc="compiling shape buckets", unit="bucket")
        for b in it:
            self._compile(b)
        self.warmed_up = True
        return len(buckets)

    def kv_cache_lost(self) -> bool:
        """True when a failed step consumed the donated cache buffers."""
        return self.kv_k.is_deleted() or self.kv_v.is_deleted()

    def reset_kv_cache(self) -> None:
        """A fresh zero cache (every request that had KV must recompute it)."""
        self.kv_k, self.kv_v = init_kv_cache(self.cfg, self.mesh, self.num_pages, self.page_size, self.kv_dtype)

    @property
    def num_compiled(self) -> int:
        return len(self._compiled)

    # ---- execution ---------------------------------------------------------------------
    def pack(self, batch: ScheduledBatch, seeds: dict[str, int]) -> PackedBatch:
        bucket = self.ladders.pick(batch.num_tokens, len(batch.seqs), max_pages_needed(batch))
        return pack_batch(batch, bucket, self.page_size, seeds)

    def execute(self, batch: ScheduledBatch, seeds: dict[str, int]) -> StepResult:
        pb = self.pack(batch, seeds)
        exe = self._compile(pb.bucket)
        inp = ModelInputs(
            token_ids=pb.token_ids, positions=pb.positions, slot_mapping=pb.slot_mapping, cu_q_lens=pb.cu_q_lens,
            q_offsets=pb.q_offsets, kv_lens=pb.kv_lens, page_table=pb.page_table, logits_indices=pb.logits_indices,
        )
        samp = SamplingArrays(pb.temperature, pb.top_k, pb.top_p, pb.seed, pb.step)
        tokens, logprobs, self.kv_k, self.kv_v = exe(self.params, self.kv_k, self.kv_v, inp, samp)
        n = len(batch.seqs)
        return StepResult(np.asarray(tokens)[:n], np.asarray(logprobs)[:n])

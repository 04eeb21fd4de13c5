"""ScheduledBatch -> padded host arrays for one jitted step (numpy only, no device work).

For each scheduled sequence s with `n` tokens starting at position `p` (kvp == 1):
  tokens [cu[s], cu[s]+n) get ids, positions p..p+n-1 and KV slots page_table[pos//page]*page + pos%page;
  q_offsets[s] = p (the bottom-right causal offset), kv_lens[s] = p + n,
  logits_indices[s] = cu[s+1] - 1 (the last token, sampled only when the sequence `samples`).
Padding tokens get slot -1 (their KV write is dropped) and padding sequences own no tokens and
no KV, so the attention kernels give them nothing to do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from medha_jax.batch import ScheduledBatch
from medha_jax.executor.buckets import Bucket


@dataclass(slots=True)
class PackedBatch:
    """Host arrays, one field per ModelInputs/SamplingArrays field, already padded to `bucket`."""

    bucket: Bucket
    token_ids: np.ndarray  # i32[T]
    positions: np.ndarray  # i32[T]
    slot_mapping: np.ndarray  # i32[T], -1 = padding
    cu_q_lens: np.ndarray  # i32[S+1]
    q_offsets: np.ndarray  # i32[S]
    kv_lens: np.ndarray  # i32[S]
    page_table: np.ndarray  # i32[S, P]
    logits_indices: np.ndarray  # i32[S]
    temperature: np.ndarray  # f32[S]
    top_k: np.ndarray  # i32[S]
    top_p: np.ndarray  # f32[S]
    seed: np.ndarray  # u32[S]
    step: np.ndarray  # i32[S]


def max_pages_needed(batch: ScheduledBatch) -> int:
    return max((len(s.page_tables[0]) for s in batch.seqs), default=1)


def pack_batch(batch: ScheduledBatch, bucket: Bucket, page_size: int, seeds: dict[str, int]) -> PackedBatch:
    T, S, P = bucket.tokens, bucket.seqs, bucket.pages
    token_ids = np.zeros(T, np.int32)
    positions = np.zeros(T, np.int32)
    slot_mapping = np.full(T, -1, np.int32)
    cu = np.zeros(S + 1, np.int32)
    q_offsets = np.zeros(S, np.int32)
    kv_lens = np.zeros(S, np.int32)
    page_table = np.zeros((S, P), np.int32)
    logits_indices = np.zeros(S, np.int32)
    temperature = np.zeros(S, np.float32)
    top_k = np.zeros(S, np.int32)
    top_p = np.ones(S, np.float32)
    seed = np.zeros(S, np.uint32)
    step = np.zeros(S, np.int32)

    t = 0
    for i, seq in enumerate(batch.seqs):
        if len(seq.page_tables) != 1:
            raise NotImplementedError("kvp > 1 batches need the KVP executor (parallelism issue)")
        n, p0 = seq.num_tokens, seq.start_pos
        pages = np.asarray(seq.page_tables[0], np.int32)
        pos = np.arange(p0, p0 + n, dtype=np.int32)
        token_ids[t : t + n] = seq.token_ids
        positions[t : t + n] = pos
        slot_mapping[t : t + n] = pages[pos // page_size] * page_size + pos % page_size
        page_table[i, : len(pages)] = pages
        q_offsets[i] = p0
        kv_lens[i] = p0 + n
        t += n
        cu[i + 1] = t
        logits_indices[i] = t - 1
        sp = seq.request.sampling_params
        temperature[i] = sp.temperature
        top_k[i] = sp.top_k
        top_p[i] = sp.top_p
        seed[i] = seeds[seq.request_id] & 0xFFFFFFFF
        step[i] = seq.request.num_output_tokens
    cu[len(batch.seqs) + 1 :] = t
    return PackedBatch(bucket, token_ids, positions, slot_mapping, cu, q_offsets, kv_lens, page_table,
                       logits_indices, temperature, top_k, top_p, seed, step)

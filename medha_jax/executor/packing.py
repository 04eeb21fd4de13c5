"""StepInput -> padded host arrays for one jitted step (numpy only, no device work).

For each scheduled sequence s with `n` tokens starting at position `p`, `model.inputs.pack_arrays`
lays out token ids, positions and, per kvp group g, the local KV slots of the tokens g holds,
kv_lens, q_offsets and the group's page table (see `medha_jax.model.inputs` for the layout);
logits_indices[r] is the token of logits row r: one row per sequence, its last token (sampled only
when the sequence `samples`), except a chunk of a prompt being scored (`SeqInput.targets`), which
has a row per token, `target[r]` the prompt token whose log-probability the row returns (-1: the
sampled token's); the sampling fields are per row;
feed_index marks a pending last token (`SeqInput.feed`): the step reads its id on the device.
Padding tokens get slot -1 (their KV write is dropped) and padding sequences own no tokens and
no KV, so the attention kernels give them nothing to do.

A `PackedBatch` can be padded further (`pad_to`) so that the microbatches in flight in one
pipeline tick share a shape bucket; `empty` is a microbatch that computes nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from medha_jax.executor.buckets import Bucket
from medha_jax.model.inputs import pack_arrays
from medha_jax.step_input import StepInput

MODEL_FIELDS = ("token_ids", "positions", "slot_mapping", "cu_q_lens", "q_offsets", "kv_lens", "page_table",
                "logits_indices")
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed", "step", "target")


@dataclass(slots=True)
class PackedBatch:
    """Host arrays, one field per ModelInputs/SamplingArrays field, already padded to `bucket`."""

    bucket: Bucket
    token_ids: np.ndarray  # i32[T]
    positions: np.ndarray  # i32[T]
    slot_mapping: np.ndarray  # i32[kvp, T], -1 = not on this group / padding
    cu_q_lens: np.ndarray  # i32[S+1]
    q_offsets: np.ndarray  # i32[kvp, S]
    kv_lens: np.ndarray  # i32[kvp, S]
    page_table: np.ndarray  # i32[kvp, S, P]
    logits_indices: np.ndarray  # i32[S]: per logits row (rows <= sequences' slots S)
    feed_index: np.ndarray  # i32[T]: index into the previous step's sampled tokens, -1 = use token_ids
    temperature: np.ndarray  # f32[S]
    top_k: np.ndarray  # i32[S]
    top_p: np.ndarray  # f32[S]
    seed: np.ndarray  # u32[S]
    step: np.ndarray  # i32[S]
    target: np.ndarray  # i32[S]: -1 = the sampled token's logprob


def pack_batch(step: StepInput, bucket: Bucket, page_size: int, *, kvp: int = 1,
               group_tokens: int | None = None) -> PackedBatch:
    seqs = [(seq.token_ids, seq.start_pos, seq.page_tables) for seq in step.seqs]
    arrays = pack_arrays(seqs, page_size, tokens=bucket.tokens, num_seqs=bucket.seqs, pages=bucket.pages,
                         kvp=kvp, group_tokens=group_tokens)
    S = bucket.seqs
    temperature = np.zeros(S, np.float32)
    top_k = np.zeros(S, np.int32)
    top_p = np.ones(S, np.float32)
    seed = np.zeros(S, np.uint32)
    step_no = np.zeros(S, np.int32)
    target = np.full(S, -1, np.int32)
    logits_indices = np.zeros(S, np.int32)
    feed_index = np.full(bucket.tokens, -1, np.int32)
    cu = arrays["cu_q_lens"]
    row = 0
    for i, seq in enumerate(step.seqs):
        end = cu[i + 1]
        n = seq.num_rows  # rows [row, row + n): the sequence's last n tokens (n = 1: its last)
        if seq.targets:
            rows = slice(row, row + n)
            logits_indices[rows] = np.arange(end - n, end)
            target[rows] = seq.targets
        else:  # the common case, scalar stores (hundreds of decodes per step)
            rows = row
            logits_indices[row] = end - 1
        temperature[rows] = seq.temperature
        top_k[rows] = seq.top_k
        top_p[rows] = seq.top_p
        seed[rows] = seq.seed & 0xFFFFFFFF
        step_no[rows] = seq.step
        if seq.feed >= 0:
            feed_index[end - 1] = seq.feed  # the pending token is the sequence's last
        row += n
    if row > S:
        raise ValueError(f"{row} logits rows do not fit the bucket's {S} sequence slots")
    arrays["logits_indices"] = logits_indices
    return PackedBatch(bucket, **arrays, feed_index=feed_index, temperature=temperature, top_k=top_k, top_p=top_p,
                       seed=seed, step=step_no, target=target)


def empty(bucket: Bucket, kvp: int) -> PackedBatch:
    """A microbatch with no tokens and no sequences (pipeline slots with nothing in them)."""
    arrays = pack_arrays([], 1, tokens=bucket.tokens, num_seqs=bucket.seqs, pages=bucket.pages, kvp=kvp)
    S = bucket.seqs
    return PackedBatch(bucket, **arrays, feed_index=np.full(bucket.tokens, -1, np.int32),
                       temperature=np.zeros(S, np.float32), top_k=np.zeros(S, np.int32),
                       top_p=np.ones(S, np.float32), seed=np.zeros(S, np.uint32), step=np.zeros(S, np.int32),
                       target=np.full(S, -1, np.int32))


def pad_to(pb: PackedBatch, bucket: Bucket) -> PackedBatch:
    """The same microbatch in a bucket at least as large in every dimension."""
    if bucket == pb.bucket:
        return pb
    dt, ds, dp = (bucket.tokens - pb.bucket.tokens, bucket.seqs - pb.bucket.seqs, bucket.pages - pb.bucket.pages)
    if min(dt, ds, dp) < 0:
        raise ValueError(f"cannot pad a batch of bucket {pb.bucket} down to {bucket}")
    last = lambda a, n, **kw: np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, n)], **kw)  # noqa: E731
    return dataclasses.replace(
        pb, bucket=bucket,
        token_ids=last(pb.token_ids, dt), positions=last(pb.positions, dt),
        slot_mapping=last(pb.slot_mapping, dt, constant_values=-1),
        cu_q_lens=last(pb.cu_q_lens, ds, mode="edge"),
        q_offsets=last(pb.q_offsets, ds), kv_lens=last(pb.kv_lens, ds),
        page_table=np.pad(pb.page_table, ((0, 0), (0, ds), (0, dp))),
        logits_indices=last(pb.logits_indices, ds), feed_index=last(pb.feed_index, dt, constant_values=-1),
        temperature=last(pb.temperature, ds),
        top_k=last(pb.top_k, ds), top_p=last(pb.top_p, ds, constant_values=1.0), seed=last(pb.seed, ds),
        step=last(pb.step, ds), target=last(pb.target, ds, constant_values=-1),
    )

"""StepInput -> padded host arrays for one jitted step (numpy only, no device work).

Each kvp group runs its own batch: `model.inputs.pack_arrays` places every scheduled sequence on
its owner group (`model.inputs.place`) and lays out, per group, token ids and positions, and
for the KV each group holds of every group's sequences the local slots, kv_lens, q_offsets and
page tables (see `medha_jax.model.inputs`). logits_indices[g, r] is the token of group g's logits
row r: one row per sequence, its last token (sampled only when the sequence `samples`), except
a chunk of a prompt being scored (`SeqInput.targets`), which has a row per token, `target[g, r]`
the prompt token whose log-probability the row returns (-1: the sampled token's); the sampling
fields are per row of a group; out_rows lists the step's rows in its own order (sequence after
sequence) as g * S + r, the order the device returns them in. feed_index marks a pending last
token (`SeqInput.feed`): the step reads its id on the device. Padding tokens get slot -1 (their
KV write is dropped) and padding sequences own no tokens and no KV, so the attention kernels
give them nothing to do.

A `PackedBatch` can be padded further (`pad_to`) so that the microbatches in flight in one
pipeline tick share a shape bucket; `empty` is a microbatch that computes nothing. A bucket's
(T, S, P) are per group.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from medha_jax.executor.buckets import Bucket
from medha_jax.model.inputs import pack_arrays, place
from medha_jax.step_input import StepInput

MODEL_FIELDS = ("token_ids", "positions", "slot_mapping", "cu_q_lens", "q_offsets", "kv_lens", "page_table",
                "logits_indices")
SAMPLING_FIELDS = ("temperature", "top_k", "top_p", "seed", "step", "target")
EXIT_FIELDS = (*SAMPLING_FIELDS, "out_rows")  # read from the microbatch leaving the pipeline


@dataclass(slots=True)
class PackedBatch:
    """Host arrays, one field per ModelInputs/SamplingArrays field, already padded to `bucket`."""

    bucket: Bucket
    token_ids: np.ndarray  # i32[kvp, T]
    positions: np.ndarray  # i32[kvp, T]
    slot_mapping: np.ndarray  # i32[kvp, kvp, T], -1 = not on this group / padding
    cu_q_lens: np.ndarray  # i32[kvp, S+1]
    q_offsets: np.ndarray  # i32[kvp, kvp, S]
    kv_lens: np.ndarray  # i32[kvp, kvp, S]
    page_table: np.ndarray  # i32[kvp, kvp, S, P]
    logits_indices: np.ndarray  # i32[kvp, S]: per logits row of a group (rows <= sequence slots S)
    feed_index: np.ndarray  # i32[kvp, T]: index into the previous step's sampled tokens, -1 = use token_ids
    temperature: np.ndarray  # f32[kvp, S]
    top_k: np.ndarray  # i32[kvp, S]
    top_p: np.ndarray  # f32[kvp, S]
    seed: np.ndarray  # u32[kvp, S]
    step: np.ndarray  # i32[kvp, S]
    target: np.ndarray  # i32[kvp, S]: -1 = the sampled token's logprob
    out_rows: np.ndarray  # i32[kvp*S]: the step's rows in order, as group * S + row (padding: 0)


def specs(step: StepInput) -> list[tuple]:
    """The step's sequences as `model.inputs.SeqSpec`s (what `place` and `pack_arrays` read)."""
    return [(seq.token_ids, seq.start_pos, seq.page_tables, seq.first_group) for seq in step.seqs]


def pack_batch(step: StepInput, bucket: Bucket, page_size: int, *, kvp: int = 1,
               group_tokens: int | None = None, slots: list[tuple[int, int]] | None = None) -> PackedBatch:
    """slots: `place(specs(step), kvp, group_tokens)` when the caller has it already (with one
    group and nothing scored it is not needed)."""
    seqs = specs(step)
    one_row_each = kvp == 1 and not any(seq.targets for seq in step.seqs)
    if slots is None and not one_row_each:
        slots = place(seqs, kvp, group_tokens)
    arrays = pack_arrays(seqs, page_size, tokens=bucket.tokens, num_seqs=bucket.seqs, pages=bucket.pages,
                         kvp=kvp, group_tokens=group_tokens, slots=slots)
    S = bucket.seqs
    sampling = dict(temperature=np.zeros((kvp, S), np.float32), top_k=np.zeros((kvp, S), np.int32),
                    top_p=np.ones((kvp, S), np.float32), seed=np.zeros((kvp, S), np.uint32),
                    step=np.zeros((kvp, S), np.int32), target=np.full((kvp, S), -1, np.int32))
    feed_index = np.full((kvp, bucket.tokens), -1, np.int32)
    out_rows = np.zeros(kvp * S, np.int32)
    if one_row_each:
        _one_row_each(step, arrays, sampling, feed_index, out_rows)
    else:
        arrays["logits_indices"] = _rows(step, arrays["cu_q_lens"], slots, sampling, feed_index, out_rows, kvp, S)
    return PackedBatch(bucket, **arrays, feed_index=feed_index, **sampling, out_rows=out_rows)


def _one_row_each(step: StepInput, arrays: dict, sampling: dict, feed_index: np.ndarray, out_rows: np.ndarray) -> None:
    """One group, one logits row per sequence (nothing scored): row i is sequence i, its last
    token, as `pack_arrays` already set logits_indices; the sampling fields from one array
    conversion rather than six scalar stores per sequence (`_rows` is its reference in the tests)."""
    n = len(step.seqs)
    if n == 0:
        return
    # cols: f64[n, 6] (every value an integer below 2**53 or a float32 setting: exact in float64)
    cols = np.array([(s.temperature, s.top_k, s.top_p, s.seed & 0xFFFFFFFF, s.step, s.feed) for s in step.seqs],
                    np.float64)
    for k, name in enumerate(("temperature", "top_k", "top_p", "seed", "step")):
        sampling[name][0, :n] = cols[:, k]
    fed = cols[:, 5] >= 0
    if fed.any():  # a pending token is its sequence's last
        feed_index[0, arrays["cu_q_lens"][0, 1 : n + 1][fed] - 1] = cols[fed, 5]
    out_rows[:n] = np.arange(n)


def _rows(step: StepInput, cu: np.ndarray, slots, sampling: dict, feed_index: np.ndarray, out_rows: np.ndarray,
          kvp: int, S: int) -> np.ndarray:
    """Logits rows, sampling fields and feeds one sequence at a time (any groups, scored chunks);
    returns logits_indices."""
    logits_indices = np.zeros((kvp, S), np.int32)
    temperature, top_k, top_p = sampling["temperature"], sampling["top_k"], sampling["top_p"]
    seed, step_no, target = sampling["seed"], sampling["step"], sampling["target"]
    rows_on = [0] * kvp  # logits rows of each group so far
    out = 0  # rows of the step so far
    for seq, (g, i) in zip(step.seqs, slots):
        end = cu[g, i + 1]
        n = seq.num_rows  # rows [row, row + n) of group g: the sequence's last n tokens (n = 1: its last)
        row = rows_on[g]
        if row + n > S:
            raise ValueError(f"{row + n} logits rows do not fit the bucket's {S} sequence slots"
                             + (f" on kvp group {g}" if kvp > 1 else ""))
        if seq.targets:
            rows = slice(row, row + n)
            logits_indices[g, rows] = np.arange(end - n, end)
            target[g, rows] = seq.targets
            out_rows[out : out + n] = g * S + np.arange(row, row + n)
        else:  # scalar stores
            rows = row
            logits_indices[g, row] = end - 1
            out_rows[out] = g * S + row
        temperature[g, rows] = seq.temperature
        top_k[g, rows] = seq.top_k
        top_p[g, rows] = seq.top_p
        seed[g, rows] = seq.seed & 0xFFFFFFFF
        step_no[g, rows] = seq.step
        if seq.feed >= 0:
            feed_index[g, end - 1] = seq.feed  # the pending token is the sequence's last
        rows_on[g] = row + n
        out += n
    return logits_indices


def empty(bucket: Bucket, kvp: int) -> PackedBatch:
    """A microbatch with no tokens and no sequences (pipeline slots with nothing in them)."""
    arrays = pack_arrays([], 1, tokens=bucket.tokens, num_seqs=bucket.seqs, pages=bucket.pages, kvp=kvp)
    grouped = lambda dtype, fill=0: np.full((kvp, bucket.seqs), fill, dtype)  # noqa: E731
    return PackedBatch(bucket, **arrays, feed_index=np.full((kvp, bucket.tokens), -1, np.int32),
                       temperature=grouped(np.float32), top_k=grouped(np.int32), top_p=grouped(np.float32, 1.0),
                       seed=grouped(np.uint32), step=grouped(np.int32), target=grouped(np.int32, -1),
                       out_rows=np.zeros(kvp * bucket.seqs, np.int32))


def pad_to(pb: PackedBatch, bucket: Bucket) -> PackedBatch:
    """The same microbatch in a bucket at least as large in every dimension."""
    if bucket == pb.bucket:
        return pb
    dt, ds, dp = (bucket.tokens - pb.bucket.tokens, bucket.seqs - pb.bucket.seqs, bucket.pages - pb.bucket.pages)
    if min(dt, ds, dp) < 0:
        raise ValueError(f"cannot pad a batch of bucket {pb.bucket} down to {bucket}")
    last = lambda a, n, **kw: np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, n)], **kw)  # noqa: E731
    S = pb.bucket.seqs
    return dataclasses.replace(
        pb, bucket=bucket,
        token_ids=last(pb.token_ids, dt), positions=last(pb.positions, dt),
        slot_mapping=last(pb.slot_mapping, dt, constant_values=-1),
        cu_q_lens=last(pb.cu_q_lens, ds, mode="edge"),
        q_offsets=last(pb.q_offsets, ds), kv_lens=last(pb.kv_lens, ds),
        page_table=np.pad(pb.page_table, ((0, 0), (0, 0), (0, ds), (0, dp))),
        logits_indices=last(pb.logits_indices, ds), feed_index=last(pb.feed_index, dt, constant_values=-1),
        temperature=last(pb.temperature, ds),
        top_k=last(pb.top_k, ds), top_p=last(pb.top_p, ds, constant_values=1.0), seed=last(pb.seed, ds),
        step=last(pb.step, ds), target=last(pb.target, ds, constant_values=-1),
        # group g's row r moves from g*S + r to g*(S + ds) + r
        out_rows=np.pad(pb.out_rows // S * bucket.seqs + pb.out_rows % S, (0, (bucket.seqs - S) * len(pb.token_ids))),
    )

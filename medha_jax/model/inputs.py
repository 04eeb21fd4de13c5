"""`ModelInputs`: the device arrays of one model step (built by the executor, read by the model).

A flattened, padded ragged batch: T token slots shared by S sequence slots. All arrays are
replicated over the mesh. Padding tokens have slot_mapping -1 (their K/V is not written) and
belong to no sequence (index >= cu_q_lens[S]); padding sequences have 0 query tokens.
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np
from flax import struct


@struct.dataclass
class ModelInputs:
    token_ids: jnp.ndarray
    """i32[T] token ids (padding: any valid id, e.g. 0)."""
    positions: jnp.ndarray
    """i32[T] absolute position of each token (RoPE)."""
    slot_mapping: jnp.ndarray
    """i32[T] flat slot page*page_size + offset in the LOCAL page pool for this token's K/V;
    -1 = do not write."""
    cu_q_lens: jnp.ndarray
    """i32[S+1] tokens of sequence s are [cu_q_lens[s], cu_q_lens[s+1])."""
    q_offsets: jnp.ndarray
    """i32[S] query i of sequence s sees local keys j <= q_offsets[s] + i (normally kv_len - q_len)."""
    kv_lens: jnp.ndarray
    """i32[S] local keys of sequence s after this step's writes."""
    page_table: jnp.ndarray
    """i32[S, P] local pages of sequence s in order."""
    logits_indices: jnp.ndarray
    """i32[S] which token's hidden state gives sequence s's logits."""

    @property
    def num_tokens(self) -> int:
        return self.token_ids.shape[0]

    @property
    def num_seqs(self) -> int:
        return self.kv_lens.shape[0]


def make_inputs(seqs: Sequence[tuple[Sequence[int], int, Sequence[int]]], page_size: int,
                pad_tokens: int | None = None, pad_seqs: int | None = None,
                pad_pages: int | None = None) -> ModelInputs:
    """ModelInputs for a batch of `(token_ids, start_pos, pages)`: each sequence's tokens sit at
    positions start_pos.. and its KV lives in `pages` (page i holds positions
    [i*page_size, (i+1)*page_size)); logits come from each sequence's last token.

    Pads to `pad_tokens` token slots, `pad_seqs` sequence slots (0 tokens each) and `pad_pages`
    page-table columns (fixed shapes for jit). A plain host-side builder for tests, tools and
    simple loops; the executor packs its batches itself.
    """
    ids, pos, slots, cu, offs, kv_lens, tables, last = [], [], [], [0], [], [], [], []
    for tok, start, pages in seqs:
        tok = np.asarray(tok, dtype=np.int32).reshape(-1)
        n, end = tok.shape[0], start + tok.shape[0]
        if n == 0:
            raise ValueError("a scheduled sequence needs at least one token")
        if len(pages) * page_size < end:
            raise ValueError(f"{len(pages)} pages of {page_size} cannot hold {end} positions")
        p = np.arange(start, end, dtype=np.int32)
        table = np.asarray(pages, dtype=np.int32)
        ids.append(tok)
        pos.append(p)
        slots.append(table[p // page_size] * page_size + p % page_size)
        last.append(cu[-1] + n - 1)
        cu.append(cu[-1] + n)
        offs.append(start)
        kv_lens.append(end)
        tables.append(table)
    T = cu[-1] if pad_tokens is None else pad_tokens
    S = len(seqs) if pad_seqs is None else pad_seqs
    Pw = max(len(t) for t in tables) if pad_pages is None else pad_pages
    if T < cu[-1] or S < len(seqs) or Pw < max(len(t) for t in tables):
        raise ValueError(f"padding ({T} tokens, {S} seqs, {Pw} pages) is smaller than the batch "
                         f"({cu[-1]}, {len(seqs)}, {max(len(t) for t in tables)})")
    pad_t, pad_s = T - cu[-1], S - len(seqs)
    page_table = np.zeros((S, Pw), np.int32)
    for i, t in enumerate(tables):
        page_table[i, : len(t)] = t
    i32 = lambda a: jnp.asarray(np.asarray(a, dtype=np.int32))
    return ModelInputs(
        token_ids=i32(np.pad(np.concatenate(ids), (0, pad_t))),
        positions=i32(np.pad(np.concatenate(pos), (0, pad_t))),
        slot_mapping=i32(np.pad(np.concatenate(slots), (0, pad_t), constant_values=-1)),
        cu_q_lens=i32(cu + [cu[-1]] * pad_s),
        q_offsets=i32(offs + [0] * pad_s),
        kv_lens=i32(kv_lens + [0] * pad_s),
        page_table=i32(page_table),
        logits_indices=i32(last + [0] * pad_s),
    )


def single_sequence_inputs(token_ids: Sequence[int], start_pos: int, pages: Sequence[int], page_size: int,
                           pad_tokens: int | None = None, pad_pages: int | None = None) -> ModelInputs:
    """`make_inputs` for one sequence."""
    return make_inputs([(token_ids, start_pos, pages)], page_size, pad_tokens, None, pad_pages)

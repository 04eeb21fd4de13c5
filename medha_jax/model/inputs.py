"""`ModelInputs`: the device arrays of one model step (built by the executor, read by the model).

A flattened, padded ragged batch: T token slots shared by S sequence slots. All arrays are
replicated over the mesh. Padding tokens have slot_mapping -1 (their K/V is not written) and
belong to no sequence (index >= cu_q_lens[S]); padding sequences have 0 query tokens.
"""

from __future__ import annotations

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


def single_sequence_inputs(token_ids, start_pos: int, pages: list[int], page_size: int,
                           pad_tokens: int | None = None, pad_pages: int | None = None) -> ModelInputs:
    """ModelInputs for one sequence whose tokens `token_ids` sit at positions start_pos.. and whose
    KV lives in `pages` (page i holds positions [i*page_size, (i+1)*page_size)).

    Optional padding to `pad_tokens` token slots and `pad_pages` page-table columns (fixed shapes
    for jit). A convenience for tests, tools and simple loops; the executor builds batches itself.
    """
    ids = np.asarray(token_ids, dtype=np.int32).reshape(-1)
    n = ids.shape[0]
    end = start_pos + n
    if len(pages) * page_size < end:
        raise ValueError(f"{len(pages)} pages of {page_size} cannot hold {end} positions")
    T = n if pad_tokens is None else pad_tokens
    Pw = len(pages) if pad_pages is None else pad_pages
    if T < n or Pw < len(pages):
        raise ValueError(f"padding ({T} tokens, {Pw} pages) is smaller than the data ({n}, {len(pages)})")
    pos = np.arange(start_pos, end, dtype=np.int32)
    table = np.asarray(pages, dtype=np.int32)
    slots = table[pos // page_size] * page_size + pos % page_size
    pad = T - n
    return ModelInputs(
        token_ids=jnp.asarray(np.pad(ids, (0, pad))),
        positions=jnp.asarray(np.pad(pos, (0, pad))),
        slot_mapping=jnp.asarray(np.pad(slots.astype(np.int32), (0, pad), constant_values=-1)),
        cu_q_lens=jnp.asarray(np.array([0, n], dtype=np.int32)),
        q_offsets=jnp.asarray(np.array([start_pos], dtype=np.int32)),
        kv_lens=jnp.asarray(np.array([end], dtype=np.int32)),
        page_table=jnp.asarray(np.pad(table, (0, Pw - len(pages)))[None, :]),
        logits_indices=jnp.asarray(np.array([n - 1], dtype=np.int32)),
    )

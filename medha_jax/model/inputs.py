"""`ModelInputs`: the device arrays of one model step (built on the host, read by the model).

A flattened, padded ragged batch: T token slots shared by S sequence slots. Token-level and
sequence-level fields are the same for every kvp group; the four fields that say where KV lives
(`slot_mapping`, `q_offsets`, `kv_lens`, `page_table`) carry a leading kvp-group dimension,
sharded over "kvp" (`sharding.INPUT_AXES`): group g sees only its own pages.

Progressive KVP onboarding (the KV manager's layout): group g holds positions
[g*M, (g+1)*M) of every sequence, M = `group_tokens`; local key j of group g is position g*M + j.
So for a sequence whose tokens sit at positions [p, p+n):
  slot_mapping[g]   the local slot of each token that group g holds, -1 for the others
  kv_lens[g]        clamp(p + n - g*M, 0, M): local keys after this step's writes
  q_offsets[g]      p - g*M: query i (position p+i) sees local key j iff g*M + j <= p + i
                    (large for groups holding only earlier positions: every key visible;
                    negative for a group the chunk only reaches part-way into)
Padding tokens have slot -1 (their K/V is not written) and belong to no sequence (index >=
cu_q_lens[S]); padding sequences have 0 query tokens and kv_len 0.

Data flow: `pack_arrays(seqs, ...)` (numpy, host) -> dict of padded arrays -> `ModelInputs`
(the executor adds its sampling arrays and, for the pipeline, stacks one microbatch per stage).
"""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np
from flax import struct

UNBOUNDED = 1 << 30  # group_tokens when everything lives on group 0


@struct.dataclass
class ModelInputs:
    token_ids: jnp.ndarray
    """i32[T] token ids (padding: any valid id, e.g. 0)."""
    positions: jnp.ndarray
    """i32[T] absolute position of each token (RoPE)."""
    slot_mapping: jnp.ndarray
    """i32[kvp, T] flat slot page*page_size + offset in group g's LOCAL page pool for this
    token's K/V; -1 = not written on that group."""
    cu_q_lens: jnp.ndarray
    """i32[S+1] tokens of sequence s are [cu_q_lens[s], cu_q_lens[s+1])."""
    q_offsets: jnp.ndarray
    """i32[kvp, S] query i of sequence s sees local keys j <= q_offsets[g, s] + i."""
    kv_lens: jnp.ndarray
    """i32[kvp, S] local keys of sequence s on group g after this step's writes."""
    page_table: jnp.ndarray
    """i32[kvp, S, P] group g's local pages of sequence s in order."""
    logits_indices: jnp.ndarray
    """i32[S] which token's hidden state gives sequence s's logits."""

    @property
    def num_tokens(self) -> int:
        return self.token_ids.shape[-1]

    @property
    def num_seqs(self) -> int:
        return self.kv_lens.shape[-1]


SeqSpec = tuple[Sequence[int], int, Sequence[Sequence[int]]]
"""(token_ids, start_pos, page tables: one list of local pages per kvp group it touches)."""


def pack_arrays(seqs: Sequence[SeqSpec], page_size: int, *, tokens: int, num_seqs: int, pages: int,
                kvp: int = 1, group_tokens: int | None = None) -> dict[str, np.ndarray]:
    """Host arrays of `ModelInputs` for `seqs`, padded to (tokens, num_seqs, pages).

    Each sequence's logits come from its last token. Raises ValueError when the batch does not
    fit the padding or a page table cannot hold the positions.
    """
    M = UNBOUNDED if group_tokens is None else group_tokens
    n_tok = sum(len(t) for t, _, _ in seqs)
    width = max((len(t) for _, _, tables in seqs for t in tables), default=0)
    if n_tok > tokens or len(seqs) > num_seqs or width > pages:
        raise ValueError(f"padding ({tokens} tokens, {num_seqs} seqs, {pages} pages) is smaller than the "
                         f"batch ({n_tok}, {len(seqs)}, {width})")
    out = {
        "token_ids": np.zeros(tokens, np.int32),
        "positions": np.zeros(tokens, np.int32),
        "slot_mapping": np.full((kvp, tokens), -1, np.int32),
        "cu_q_lens": np.zeros(num_seqs + 1, np.int32),
        "q_offsets": np.zeros((kvp, num_seqs), np.int32),
        "kv_lens": np.zeros((kvp, num_seqs), np.int32),
        "page_table": np.zeros((kvp, num_seqs, pages), np.int32),
        "logits_indices": np.zeros(num_seqs, np.int32),
    }
    group_start = np.arange(kvp, dtype=np.int64) * M  # group_start: [kvp]
    t = 0
    for i, (tok, start, tables) in enumerate(seqs):
        n, end = len(tok), start + len(tok)
        if n == 0:
            raise ValueError("a scheduled sequence needs at least one token")
        if len(tables) > kvp:
            raise ValueError(f"a sequence has page tables for {len(tables)} kvp groups, the mesh has {kvp}")
        pos = np.arange(start, end, dtype=np.int64)
        out["token_ids"][t : t + n] = tok
        out["positions"][t : t + n] = pos
        grp = pos // M
        for g, table in enumerate(tables):
            mine = grp == g
            table = np.asarray(table, np.int64)
            out["page_table"][g, i, : len(table)] = table
            if mine.any():
                local = pos[mine] - g * M
                if local[-1] // page_size >= len(table):
                    raise ValueError(f"{len(table)} pages of {page_size} on kvp group {g} cannot hold "
                                     f"local position {local[-1]}")
                out["slot_mapping"][g, t : t + n][mine] = table[local // page_size] * page_size + local % page_size
        if grp[-1] >= len(tables):
            raise ValueError(f"page tables for {len(tables)} kvp group(s) of {M} tokens cannot hold position {end - 1}")
        out["kv_lens"][:, i] = np.clip(end - group_start, 0, M)
        out["q_offsets"][:, i] = np.clip(start - group_start, -UNBOUNDED, UNBOUNDED)
        t += n
        out["cu_q_lens"][i + 1] = t
        out["logits_indices"][i] = t - 1
    out["cu_q_lens"][len(seqs) + 1 :] = t
    return out


def make_inputs(seqs: Sequence[tuple[Sequence[int], int, Sequence]], page_size: int,
                pad_tokens: int | None = None, pad_seqs: int | None = None,
                pad_pages: int | None = None, *, kvp: int = 1, group_tokens: int | None = None) -> ModelInputs:
    """ModelInputs for a batch of `(token_ids, start_pos, pages)`: each sequence's tokens sit at
    positions start_pos.. and its KV lives in `pages` (page i holds positions
    [i*page_size, (i+1)*page_size)); logits come from each sequence's last token.

    With kvp > 1, `pages` is a list of page lists, one per kvp group, and group g holds
    positions [g*group_tokens, (g+1)*group_tokens). Pads to `pad_tokens` token slots,
    `pad_seqs` sequence slots (0 tokens each) and `pad_pages` page-table columns (fixed shapes
    for jit). A plain host-side builder for tests, tools and simple loops.
    """
    specs = []
    for tok, start, pages in seqs:
        tables = [list(p) for p in pages] if kvp > 1 else [list(pages)]
        if kvp == 1 and group_tokens is None:
            need = -(-(start + len(tok)) // page_size)
            if len(tables[0]) < need:
                raise ValueError(f"{len(tables[0])} pages of {page_size} cannot hold {start + len(tok)} positions")
        specs.append((np.asarray(tok, np.int32), int(start), tables))
    n_tok = sum(len(t) for t, _, _ in specs)
    width = max(len(t) for _, _, tables in specs for t in tables)
    arrays = pack_arrays(
        specs, page_size, tokens=n_tok if pad_tokens is None else pad_tokens,
        num_seqs=len(specs) if pad_seqs is None else pad_seqs,
        pages=width if pad_pages is None else pad_pages, kvp=kvp, group_tokens=group_tokens)
    return ModelInputs(**{k: jnp.asarray(v) for k, v in arrays.items()})


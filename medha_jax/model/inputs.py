"""`ModelInputs`: the device arrays of one model step (built on the host, read by the model).

Each kvp group runs its own batch (Mnemosyne's per-group batches): a flattened, padded ragged
batch of T token slots shared by S sequence slots, one per group, stacked on a leading group
dimension sharded over "kvp" (`sharding.INPUT_AXES`). A sequence's tokens run on one group, its
owner this step (`kvp_layout.owner`: the group holding its last position); the four fields that
say where KV lives (`slot_mapping`, `q_offsets`, `kv_lens`, `page_table`) are per (group g,
source group j): what group g holds of the sequences of group j's batch, because a long
sequence's earlier keys sit on other groups, which attend its queries to them (the model
all-gathers q/k/v over kvp and sends the partial outputs back to the owner to be merged).

Progressive KVP onboarding (the KV manager's layout, `kvp_layout`): a sequence placed on first
group h keeps block b = positions [b*M, (b+1)*M) on group (h + b) % kvp, M = `group_tokens`;
local key i of that block is position b*M + i. So for a sequence of group j's batch (slot s)
whose tokens sit at positions [p, p+n), and group g holding its block b:
  slot_mapping[g, j]   the local slot on g of each token in block b, -1 for the others
  kv_lens[g, j, s]     clamp(p + n - b*M, 0, M): local keys after this step's writes
  q_offsets[g, j, s]   p - b*M: query i (position p+i) sees local key k iff b*M + k <= p + i
                       (large for an earlier block: every key visible; negative for a block
                       the chunk only reaches part-way into)
A group holding nothing of a sequence has kv_len 0 for it. Padding tokens have slot -1 (their
K/V is not written) and belong to no sequence (index >= cu_q_lens[g, S]); padding sequences
have 0 query tokens and kv_len 0. With one group everything has a leading dimension of 1.

Data flow: `pack_arrays(seqs, ...)` (numpy, host) -> dict of padded arrays -> `ModelInputs`
(the executor adds its sampling arrays and, for the pipeline, stacks one microbatch per stage).
"""

from __future__ import annotations

from array import array
from typing import Sequence

import jax.numpy as jnp
import numpy as np
from flax import struct

from medha_jax.kvp_layout import owner

UNBOUNDED = 1 << 30  # group_tokens when everything lives on group 0


@struct.dataclass
class ModelInputs:
    token_ids: jnp.ndarray
    """i32[kvp, T] token ids of each group's batch (padding: any valid id, e.g. 0)."""
    positions: jnp.ndarray
    """i32[kvp, T] absolute position of each token (RoPE)."""
    slot_mapping: jnp.ndarray
    """i32[kvp, kvp, T] [g, j, t]: flat slot page*page_size + offset in group g's LOCAL page
    pool for the K/V of token t of group j's batch; -1 = not written on group g."""
    cu_q_lens: jnp.ndarray
    """i32[kvp, S+1] tokens of group g's sequence s are [cu_q_lens[g, s], cu_q_lens[g, s+1])."""
    q_offsets: jnp.ndarray
    """i32[kvp, kvp, S] [g, j, s]: query i of group j's sequence s sees group g's local keys
    k <= q_offsets[g, j, s] + i."""
    kv_lens: jnp.ndarray
    """i32[kvp, kvp, S] [g, j, s]: group g's local keys of group j's sequence s after the writes."""
    page_table: jnp.ndarray
    """i32[kvp, kvp, S, P] [g, j, s]: group g's local pages of group j's sequence s in order."""
    logits_indices: jnp.ndarray
    """i32[kvp, S] which token of its group's batch gives each logits row."""

    @property
    def num_tokens(self) -> int:
        return self.token_ids.shape[-1]

    @property
    def num_seqs(self) -> int:
        return self.kv_lens.shape[-1]


SeqSpec = tuple
"""(token_ids, start_pos, page tables: one list of local pages per block it touches[, first group
h: block b lives on group (h + b) % kvp; 0 when left out])."""


def place(seqs: Sequence[SeqSpec], kvp: int, group_tokens: int | None) -> list[tuple[int, int]]:
    """(owner group, sequence slot in that group's batch) of each sequence, in order."""
    M = UNBOUNDED if group_tokens is None else group_tokens
    counts = [0] * kvp
    out = []
    for spec in seqs:
        tok, start = spec[0], spec[1]
        g = owner(len(tok), start, spec[3] if len(spec) > 3 else 0, M, kvp) if kvp > 1 else 0
        out.append((g, counts[g]))
        counts[g] += 1
    return out


def pack_arrays(seqs: Sequence[SeqSpec], page_size: int, *, tokens: int, num_seqs: int, pages: int,
                kvp: int = 1, group_tokens: int | None = None,
                slots: Sequence[tuple[int, int]] | None = None) -> dict[str, np.ndarray]:
    """Host arrays of `ModelInputs` for `seqs`, each group's batch padded to (tokens, num_seqs,
    pages). Each sequence's logits come from its last token; it runs on its owner group
    (`place`; `slots`: its result when the caller has it already). Raises ValueError when a
    group's batch does not fit the padding or a page table cannot hold the positions.
    """
    if kvp == 1:
        return _pack_one_group(seqs, page_size, tokens=tokens, num_seqs=num_seqs, pages=pages,
                               group_tokens=group_tokens)
    return _pack_groups(seqs, page_size, tokens=tokens, num_seqs=num_seqs, pages=pages, kvp=kvp,
                        group_tokens=group_tokens, slots=slots)


def _padding_error(tokens: int, num_seqs: int, pages: int, n_tok, n_seq, width: int, kvp: int) -> ValueError:
    g = max(range(kvp), key=lambda i: (n_tok[i], n_seq[i]))
    return ValueError(f"padding ({tokens} tokens, {num_seqs} seqs, {pages} pages per kvp group) is smaller than "
                      f"the batch ({n_tok[g]}, {n_seq[g]}, {width}{f' on kvp group {g}' if kvp > 1 else ''})")


def _pack_one_group(seqs: Sequence[SeqSpec], page_size: int, *, tokens: int, num_seqs: int, pages: int,
                    group_tokens: int | None) -> dict[str, np.ndarray]:
    """`pack_arrays` with one group, with numpy over all sequences at once (the per-sequence loop
    of `_pack_groups` costs ~25 us a sequence: milliseconds a step at hundreds of decodes).
    The same arrays, the same errors; `_pack_groups` is its reference in the tests."""
    M = UNBOUNDED if group_tokens is None else group_tokens
    S = len(seqs)
    lens = np.fromiter((len(spec[0]) for spec in seqs), np.int64, S)  # query tokens per sequence
    widths = np.fromiter((len(t) for spec in seqs for t in spec[2]), np.int64)  # pages per table
    n_tables = np.fromiter((len(spec[2]) for spec in seqs), np.int64, S)
    T = int(lens.sum())
    width = int(widths.max()) if len(widths) else 0
    if T > tokens or S > num_seqs or width > pages:
        raise _padding_error(tokens, num_seqs, pages, [T], [S], width, 1)
    out = {
        "token_ids": np.zeros((1, tokens), np.int32),
        "positions": np.zeros((1, tokens), np.int32),
        "slot_mapping": np.full((1, 1, tokens), -1, np.int32),
        "cu_q_lens": np.zeros((1, num_seqs + 1), np.int32),
        "q_offsets": np.zeros((1, 1, num_seqs), np.int32),
        "kv_lens": np.zeros((1, 1, num_seqs), np.int32),
        "page_table": np.zeros((1, 1, num_seqs, pages), np.int32),
        "logits_indices": np.zeros((1, num_seqs), np.int32),
    }
    if S == 0:
        return out
    if (lens == 0).any():
        raise ValueError("a scheduled sequence needs at least one token")
    if (n_tables > 1).any():
        raise ValueError(f"a sequence has page tables for {int(n_tables.max())} kvp groups, the mesh has 1")
    starts = np.fromiter((spec[1] for spec in seqs), np.int64, S)  # i64[S]
    ends = starts + lens
    if ((ends - 1) // M >= n_tables).any():
        raise ValueError(f"page tables for 1 kvp group(s) of {M} tokens cannot hold position "
                         f"{int(ends[(ends - 1) // M >= n_tables][0]) - 1}")
    cu = np.cumsum(lens)  # i64[S]: each sequence's end in the batch
    first = cu - lens  # i64[S]: its first token slot
    seq_of = np.repeat(np.arange(S), lens)  # i64[T]: the sequence of each token slot
    pos = starts[seq_of] + np.arange(T) - first[seq_of]  # i64[T]: absolute positions
    if ((pos // page_size)[cu - 1] >= widths).any():  # a sequence's last position lies past its pages
        i = int(np.nonzero((pos // page_size)[cu - 1] >= widths)[0][0])
        raise ValueError(f"{int(widths[i])} pages of {page_size} on kvp group 0 cannot hold local position "
                         f"{int(ends[i]) - 1}")
    table = out["page_table"][0, 0]  # i32[num_seqs, pages], a view: row i <- sequence i's pages
    table[:S][np.arange(pages) < widths[:, None]] = np.concatenate([_pages(spec[2][0]) for spec in seqs])
    out["token_ids"][0, :T] = np.fromiter((t for spec in seqs for t in spec[0]), np.int64, T)
    out["positions"][0, :T] = pos
    out["slot_mapping"][0, 0, :T] = table[seq_of, pos // page_size].astype(np.int64) * page_size + pos % page_size
    out["cu_q_lens"][0, 1 : S + 1] = cu
    out["cu_q_lens"][0, S + 1 :] = T
    out["q_offsets"][0, 0, :S] = starts
    out["kv_lens"][0, 0, :S] = ends
    out["logits_indices"][0, :S] = cu - 1
    return out


def _pages(table) -> np.ndarray:
    """i32[n] page ids of one table: a view of the KV manager's int32 `array` (no per-id work), or
    converted from a list or tuple."""
    if isinstance(table, array) and table.itemsize == 4:
        return np.frombuffer(table, np.int32)
    return np.asarray(table, np.int32)


def _pack_groups(seqs: Sequence[SeqSpec], page_size: int, *, tokens: int, num_seqs: int, pages: int,
                 kvp: int, group_tokens: int | None, slots: Sequence[tuple[int, int]] | None) -> dict[str, np.ndarray]:
    """`pack_arrays` for any number of groups, one sequence at a time."""
    M = UNBOUNDED if group_tokens is None else group_tokens
    if slots is None:
        slots = place(seqs, kvp, group_tokens)
    n_tok, n_seq = [0] * kvp, [0] * kvp
    for (tok, *_), (g, _) in zip(seqs, slots):
        n_tok[g] += len(tok)
        n_seq[g] += 1
    width = max((len(t) for spec in seqs for t in spec[2]), default=0)
    if max(n_tok) > tokens or max(n_seq) > num_seqs or width > pages:
        raise _padding_error(tokens, num_seqs, pages, n_tok, n_seq, width, kvp)
    out = {
        "token_ids": np.zeros((kvp, tokens), np.int32),
        "positions": np.zeros((kvp, tokens), np.int32),
        "slot_mapping": np.full((kvp, kvp, tokens), -1, np.int32),
        "cu_q_lens": np.zeros((kvp, num_seqs + 1), np.int32),
        "q_offsets": np.zeros((kvp, kvp, num_seqs), np.int32),
        "kv_lens": np.zeros((kvp, kvp, num_seqs), np.int32),
        "page_table": np.zeros((kvp, kvp, num_seqs, pages), np.int32),
        "logits_indices": np.zeros((kvp, num_seqs), np.int32),
    }
    fill = [0] * kvp  # tokens placed in each group's batch so far
    for spec, (j, i) in zip(seqs, slots):
        tok, start, tables = spec[0], spec[1], spec[2]
        h = spec[3] if len(spec) > 3 else 0
        n, end = len(tok), start + len(tok)
        if n == 0:
            raise ValueError("a scheduled sequence needs at least one token")
        if len(tables) > kvp:
            raise ValueError(f"a sequence has page tables for {len(tables)} kvp groups, the mesh has {kvp}")
        if (end - 1) // M >= len(tables):
            raise ValueError(f"page tables for {len(tables)} kvp group(s) of {M} tokens cannot hold position {end - 1}")
        t = fill[j]
        pos = np.arange(start, end, dtype=np.int64)
        out["token_ids"][j, t : t + n] = tok
        out["positions"][j, t : t + n] = pos
        blk = pos // M
        for b, table in enumerate(tables):
            g = (h + b) % kvp
            table = np.asarray(table, np.int64)
            out["page_table"][g, j, i, : len(table)] = table
            out["kv_lens"][g, j, i] = min(max(end - b * M, 0), M)
            out["q_offsets"][g, j, i] = min(max(start - b * M, -UNBOUNDED), UNBOUNDED)
            mine = blk == b
            if mine.any():
                local = pos[mine] - b * M
                if local[-1] // page_size >= len(table):
                    raise ValueError(f"{len(table)} pages of {page_size} on kvp group {g} cannot hold "
                                     f"local position {local[-1]}")
                out["slot_mapping"][g, j, t : t + n][mine] = table[local // page_size] * page_size + local % page_size
        fill[j] = t + n
        out["cu_q_lens"][j, i + 1] = t + n
        out["logits_indices"][j, i] = t + n - 1
    for j in range(kvp):
        out["cu_q_lens"][j, n_seq[j] + 1 :] = fill[j]
    return out


def make_inputs(seqs: Sequence[tuple], page_size: int,
                pad_tokens: int | None = None, pad_seqs: int | None = None,
                pad_pages: int | None = None, *, kvp: int = 1, group_tokens: int | None = None) -> ModelInputs:
    """ModelInputs for a batch of `(token_ids, start_pos, pages[, first_group])`: each sequence's
    tokens sit at positions start_pos.. and its KV lives in `pages` (page i holds positions
    [i*page_size, (i+1)*page_size)); logits come from each sequence's last token.

    With kvp > 1, `pages` is a list of page lists, one per block of `group_tokens` positions, and
    block b lives on group (first_group + b) % kvp (first_group 0 when left out). Pads each
    group's batch to `pad_tokens` token slots, `pad_seqs` sequence slots (0 tokens each) and
    `pad_pages` page-table columns (fixed shapes for jit; default: the largest group's). A plain
    host-side builder for tests, tools and simple loops.
    """
    specs = []
    for tok, start, pages, *first in seqs:
        tables = [list(p) for p in pages] if kvp > 1 else [list(pages)]
        if kvp == 1 and group_tokens is None:
            need = -(-(start + len(tok)) // page_size)
            if len(tables[0]) < need:
                raise ValueError(f"{len(tables[0])} pages of {page_size} cannot hold {start + len(tok)} positions")
        specs.append((np.asarray(tok, np.int32), int(start), tables, *first))
    slots = place(specs, kvp, group_tokens)
    n_tok = max(sum(len(s[0]) for s, (g, _) in zip(specs, slots) if g == j) for j in range(kvp))
    n_seq = max(sum(1 for g, _ in slots if g == j) for j in range(kvp))
    width = max(len(t) for s in specs for t in s[2])
    arrays = pack_arrays(
        specs, page_size, tokens=max(n_tok, 1) if pad_tokens is None else pad_tokens,
        num_seqs=max(n_seq, 1) if pad_seqs is None else pad_seqs,
        pages=width if pad_pages is None else pad_pages, kvp=kvp, group_tokens=group_tokens)
    return ModelInputs(**{k: jnp.asarray(v) for k, v in arrays.items()})

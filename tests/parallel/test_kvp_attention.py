"""KVP attention is exact: every group holding part of a sequence's KV attends that sequence's
queries (from its owner group's batch) to its own pages (progressive layout from `pack_arrays`:
negative q offsets where a chunk only reaches part-way into a group, kv_len 0 where a group
holds nothing of a sequence), and the log-sum-exp merge of the groups' partials equals
attention over the whole, unsplit KV. For the XLA and Pallas (interpret mode) backends.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from medha_jax.model.inputs import pack_arrays, place
from pallas_kernels.api import paged_attention
from pallas_kernels.merge import merge_attention
from pallas_kernels.reference import paged_attention_reference

PAGE, M, G, H, KVH, DH, N = 16, 64, 3, 8, 2, 16, 48
# (query tokens, first position): a chunk straddling groups 0 and 1, a decode on group 2, a fresh chunk.
SEQS = [(40, 50), (1, 150), (20, 0)]


def _tables(end: int, seq: int) -> list[list[int]]:
    """Group g's pages of sequence `seq` (each group has its own pool; M / PAGE pages each)."""
    out, g = [], 0
    while g * M < end:
        n = min(end - g * M, M)
        out.append([(M // PAGE) * seq + i for i in range(-(-n // PAGE))][::-1])  # reversed: order matters
        g += 1
    return out


@pytest.mark.parametrize("backend", ["xla", "pallas"])
def test_merged_groups_equal_unsplit_attention(backend):
    rng = np.random.default_rng(0)
    specs, whole_specs = [], []
    k_split = np.zeros((G, N, PAGE, KVH, DH), np.float32)
    v_split = np.zeros_like(k_split)
    k_whole = np.zeros((N, PAGE, KVH, DH), np.float32)
    v_whole = np.zeros_like(k_whole)
    for s, (q, start) in enumerate(SEQS):
        end = start + q
        keys = rng.standard_normal((end, KVH, DH)).astype(np.float32)  # K/V of every position
        vals = rng.standard_normal((end, KVH, DH)).astype(np.float32)
        tables = _tables(end, s)
        whole = [16 * s + i for i in range(-(-end // PAGE))]
        for pos in range(end):
            g, local = divmod(pos, M)
            k_split[g, tables[g][local // PAGE], local % PAGE] = keys[pos]
            v_split[g, tables[g][local // PAGE], local % PAGE] = vals[pos]
            k_whole[whole[pos // PAGE], pos % PAGE] = keys[pos]
            v_whole[whole[pos // PAGE], pos % PAGE] = vals[pos]
        specs.append((np.zeros(q, np.int32), start, tables))
        whole_specs.append((np.zeros(q, np.int32), start, [whole]))
    split = {k: jnp.asarray(v) for k, v in
             pack_arrays(specs, PAGE, tokens=64, num_seqs=4, pages=4, kvp=G, group_tokens=M).items()}
    unsplit = {k: jnp.asarray(v) for k, v in pack_arrays(whole_specs, PAGE, tokens=64, num_seqs=4, pages=12).items()}
    assert (split["q_offsets"] < 0).any() and (split["kv_lens"] == 0).any()
    q = jnp.asarray(rng.standard_normal((64, H, DH)), jnp.float32)  # the unsplit batch's queries, in order
    ref_out, ref_lse = paged_attention_reference(
        q, jnp.asarray(k_whole), jnp.asarray(v_whole), unsplit["page_table"][0, 0], unsplit["cu_q_lens"][0],
        unsplit["q_offsets"][0, 0], unsplit["kv_lens"][0, 0], scale=0.25)
    owners = place(specs, G, M)
    assert len({j for j, _ in owners}) > 1  # the sequences run on different groups
    starts = np.cumsum([0] + [q for q, _ in SEQS])
    for j in sorted({j for j, _ in owners}):  # group j's batch: its queries, every group's partials
        cu = split["cu_q_lens"][j]
        qj = jnp.zeros((64, H, DH), jnp.float32)
        for s, (g, i) in enumerate(owners):
            if g == j:
                qj = qj.at[int(cu[i]):int(cu[i + 1])].set(q[starts[s]:starts[s + 1]])
        parts = [paged_attention(qj, jnp.asarray(k_split[g]), jnp.asarray(v_split[g]), split["page_table"][g, j],
                                 cu, split["q_offsets"][g, j], split["kv_lens"][g, j], scale=0.25, backend=backend)
                 for g in range(G)]
        out, lse = merge_attention(jnp.stack([o for o, _ in parts]), jnp.stack([lse for _, lse in parts]))
        for s, (g, i) in enumerate(owners):
            if g == j:
                mine, ref = slice(int(cu[i]), int(cu[i + 1])), slice(starts[s], starts[s + 1])
                np.testing.assert_allclose(np.asarray(out)[mine], np.asarray(ref_out)[ref], atol=2e-6)
                np.testing.assert_allclose(np.asarray(lse)[mine], np.asarray(ref_lse)[ref], atol=2e-6)

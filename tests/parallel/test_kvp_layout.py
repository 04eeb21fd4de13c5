"""KVP host-side layout: a sequence's positions spread over kvp groups (progressive onboarding),
its tokens in the batch of the group holding its last position.

Block b = positions [b*M, (b+1)*M) lives on group (first_group + b) % kvp; `pack_arrays` puts each
sequence in its owner group's batch and gives every group holding a block the local slots of the
tokens it holds, its local kv length and the q offset that makes causal masking right on local
key indices, indexed by (holding group, owner group). Exact values, checked by hand.
"""

import numpy as np
import pytest

from medha_jax.executor.buckets import Bucket
from medha_jax.executor.packing import empty, pad_to
from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.model.inputs import pack_arrays, place
from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams


def test_chunk_straddling_two_groups():
    # M = 8 positions per group, pages of 4. The chunk covers positions 6..11: 6, 7 on group 0
    # (page 5 holds local 4..7), 8..11 on group 1 (its page 2 holds local 0..3). Group 1 runs it.
    a = pack_arrays([([10, 11, 12, 13, 14, 15], 6, [[9, 5], [2]])], 4, tokens=8, num_seqs=2, pages=3,
                    kvp=3, group_tokens=8)
    np.testing.assert_array_equal(a["positions"][1, :6], np.arange(6, 12))
    np.testing.assert_array_equal(a["token_ids"][1, :6], [10, 11, 12, 13, 14, 15])
    np.testing.assert_array_equal(a["slot_mapping"][0, 1], [22, 23, -1, -1, -1, -1, -1, -1])
    np.testing.assert_array_equal(a["slot_mapping"][1, 1], [-1, -1, 8, 9, 10, 11, -1, -1])
    np.testing.assert_array_equal(a["slot_mapping"][2, 1], [-1] * 8)
    assert (a["slot_mapping"][:, [0, 2]] == -1).all()  # groups 0 and 2 run no tokens
    np.testing.assert_array_equal(a["kv_lens"][:, 1, 0], [8, 4, 0])
    np.testing.assert_array_equal(a["q_offsets"][:, 1, 0], [6, -2, 0])  # query i sees local j <= off + i
    np.testing.assert_array_equal(a["page_table"][:, 1, 0], [[9, 5, 0], [2, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(a["cu_q_lens"], [[0, 0, 0], [0, 6, 6], [0, 0, 0]])
    np.testing.assert_array_equal(a["logits_indices"][1], [5, 0])


def test_decode_on_a_later_group_sees_every_earlier_key():
    a = pack_arrays([([7], 20, [[1, 2], [3, 4], [6, 9]])], 4, tokens=4, num_seqs=1, pages=2, kvp=3, group_tokens=8)
    np.testing.assert_array_equal(a["kv_lens"][:, 2, 0], [8, 8, 5])
    np.testing.assert_array_equal(a["q_offsets"][:, 2, 0], [20, 12, 4])  # >= kv_len: all local keys visible
    np.testing.assert_array_equal(a["slot_mapping"][:, 2, 0], [-1, -1, 9 * 4 + 0])  # local 4: page 9, offset 0


def test_sequences_run_on_their_owner_groups_with_rotated_blocks():
    # Sequence A placed on group 2: block 0 on group 2, block 1 (positions 8..15) on group 0, which
    # runs its decode at position 9. Sequence B on group 1, one block: group 1 runs its chunk.
    # Sequence C on group 1, a decode at position 3: second in group 1's batch.
    seqs = [([5], 9, [[7, 1], [4, 3]], 2), ([1, 2, 3], 0, [[6]], 1), ([9], 3, [[8]], 1)]
    assert place(seqs, 3, 8) == [(0, 0), (1, 0), (1, 1)]
    a = pack_arrays(seqs, 4, tokens=4, num_seqs=2, pages=2, kvp=3, group_tokens=8)
    np.testing.assert_array_equal(a["token_ids"], [[5, 0, 0, 0], [1, 2, 3, 9], [0, 0, 0, 0]])
    np.testing.assert_array_equal(a["positions"][1], [0, 1, 2, 3])
    np.testing.assert_array_equal(a["cu_q_lens"], [[0, 1, 1], [0, 3, 4], [0, 0, 0]])
    np.testing.assert_array_equal(a["logits_indices"], [[0, 0], [2, 3], [0, 0]])
    np.testing.assert_array_equal(a["kv_lens"][:, 0, 0], [2, 0, 8])  # A: group 2 holds 0..7, group 0 8..9
    np.testing.assert_array_equal(a["page_table"][:, 0, 0], [[4, 3], [0, 0], [7, 1]])
    np.testing.assert_array_equal(a["slot_mapping"][0, 0], [4 * 4 + 1, -1, -1, -1])  # local 1 of page 4
    np.testing.assert_array_equal(a["kv_lens"][:, 1], [[0, 0], [3, 4], [0, 0]])  # B and C: group 1 only
    np.testing.assert_array_equal(a["slot_mapping"][1, 1], [24, 25, 26, 35])
    with pytest.raises(ValueError, match="kvp group 1"):  # group 1's batch has 4 tokens
        pack_arrays(seqs, 4, tokens=3, num_seqs=2, pages=2, kvp=3, group_tokens=8)


def test_page_tables_that_cannot_hold_the_positions_are_an_error():
    with pytest.raises(ValueError, match="kvp group"):
        pack_arrays([([1, 2, 3], 7, [[1, 2]])], 4, tokens=4, num_seqs=1, pages=2, kvp=2, group_tokens=8)


def test_kv_manager_tables_pack_to_the_same_layout():
    kv = KVCacheManager(num_pages_per_group=8, page_size=4, kvp=2, max_tokens_per_kvp_group=16)
    req = Request("r", list(range(30)), SamplingParams(max_tokens=1), arrival_time=0.0)
    kv.allocate(req, 30)
    tables = kv.page_tables(req)
    assert [len(t) for t in tables] == [4, 4]
    a = pack_arrays([(list(range(30)), 0, tables)], 4, tokens=32, num_seqs=1, pages=4, kvp=2, group_tokens=16)
    for g in range(2):  # group 1 holds the last position: its batch runs the chunk
        owned = a["slot_mapping"][g, 1][a["slot_mapping"][g, 1] >= 0]
        assert len(owned) == (16 if g == 0 else 14)
        assert set(owned // 4) <= set(tables[g])
    np.testing.assert_array_equal(a["kv_lens"][:, 1, 0], [16, 14])


def test_padding_a_packed_microbatch_keeps_its_tokens():
    small, big = Bucket(8, 2, 2), Bucket(16, 4, 4)
    pb = empty(small, 2)
    pb.token_ids[1, :3] = [5, 6, 7]
    pb.cu_q_lens[1, 1:] = 3
    pb.slot_mapping[0, 1, :3] = [1, 2, 3]
    pb.out_rows[:3] = [2, 0, 3]  # group 1's row 0, group 0's row 0, group 1's row 1
    out = pad_to(pb, big)
    assert out.bucket == big and out.page_table.shape == (2, 2, 4, 4)
    np.testing.assert_array_equal(out.token_ids[1, :3], [5, 6, 7])
    np.testing.assert_array_equal(out.cu_q_lens, [[0, 0, 0, 0, 0], [0, 3, 3, 3, 3]])
    np.testing.assert_array_equal(out.slot_mapping[0, 1, 3:], [-1] * 13)
    np.testing.assert_array_equal(out.top_p, [[1.0] * 4] * 2)
    np.testing.assert_array_equal(out.out_rows, [4, 0, 5, 0, 0, 0, 0, 0])  # the same rows, 4 per group now
    with pytest.raises(ValueError, match="cannot pad"):
        pad_to(out, small)

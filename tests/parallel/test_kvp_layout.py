"""KVP host-side layout: a sequence's positions spread over kvp groups (progressive onboarding).

Group g holds positions [g*M, (g+1)*M); `pack_arrays` gives each group the local slots of the
tokens it holds, its local kv length and the q offset that makes causal masking right on local
key indices. Exact values, checked by hand.
"""

import numpy as np
import pytest

from medha_jax.executor.buckets import Bucket
from medha_jax.executor.packing import empty, pad_to
from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.model.inputs import pack_arrays
from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams


def test_chunk_straddling_two_groups():
    # M = 8 positions per group, pages of 4. The chunk covers positions 6..11: 6, 7 on group 0
    # (page 5 holds local 4..7), 8..11 on group 1 (its page 2 holds local 0..3).
    a = pack_arrays([([10, 11, 12, 13, 14, 15], 6, [[9, 5], [2]])], 4, tokens=8, num_seqs=2, pages=3,
                    kvp=3, group_tokens=8)
    np.testing.assert_array_equal(a["positions"][:6], np.arange(6, 12))
    np.testing.assert_array_equal(a["slot_mapping"][0], [22, 23, -1, -1, -1, -1, -1, -1])
    np.testing.assert_array_equal(a["slot_mapping"][1], [-1, -1, 8, 9, 10, 11, -1, -1])
    np.testing.assert_array_equal(a["slot_mapping"][2], [-1] * 8)
    np.testing.assert_array_equal(a["kv_lens"][:, 0], [8, 4, 0])
    np.testing.assert_array_equal(a["q_offsets"][:, 0], [6, -2, -10])  # query i sees local j <= off + i
    np.testing.assert_array_equal(a["page_table"][:, 0], [[9, 5, 0], [2, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(a["cu_q_lens"], [0, 6, 6])
    np.testing.assert_array_equal(a["logits_indices"], [5, 0])


def test_decode_on_a_later_group_sees_every_earlier_key():
    a = pack_arrays([([7], 20, [[1, 2], [3, 4], [6, 9]])], 4, tokens=4, num_seqs=1, pages=2, kvp=3, group_tokens=8)
    np.testing.assert_array_equal(a["kv_lens"][:, 0], [8, 8, 5])
    np.testing.assert_array_equal(a["q_offsets"][:, 0], [20, 12, 4])  # >= kv_len: all local keys visible
    np.testing.assert_array_equal(a["slot_mapping"][:, 0], [-1, -1, 9 * 4 + 0])  # local 4: page 9, offset 0


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
    for g in range(2):
        owned = a["slot_mapping"][g][a["slot_mapping"][g] >= 0]
        assert len(owned) == (16 if g == 0 else 14)
        assert set(owned // 4) <= set(tables[g])
    np.testing.assert_array_equal(a["kv_lens"][:, 0], [16, 14])


def test_padding_a_packed_microbatch_keeps_its_tokens():
    small, big = Bucket(8, 2, 2), Bucket(16, 4, 4)
    pb = empty(small, 2)
    pb.token_ids[:3] = [5, 6, 7]
    pb.cu_q_lens[1:] = 3
    pb.slot_mapping[1, :3] = [1, 2, 3]
    out = pad_to(pb, big)
    assert out.bucket == big and out.page_table.shape == (2, 4, 4)
    np.testing.assert_array_equal(out.token_ids[:3], [5, 6, 7])
    np.testing.assert_array_equal(out.cu_q_lens, [0, 3, 3, 3, 3])
    np.testing.assert_array_equal(out.slot_mapping[1, 3:], [-1] * 13)
    np.testing.assert_array_equal(out.top_p, [1.0] * 4)
    with pytest.raises(ValueError, match="cannot pad"):
        pad_to(out, small)

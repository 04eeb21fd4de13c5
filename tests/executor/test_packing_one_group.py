"""The one-group packing path (numpy over all sequences at once) against the per-sequence path.

`model.inputs._pack_one_group` and `executor.packing._one_row_each` are what a kvp = 1 engine runs
every step; `_pack_groups` and `_rows` (one sequence at a time, any number of groups) are their
references. Random batches of prefill chunks and decodes, page tables as the KV manager keeps
them (int32 arrays) and as lists, every array compared; bad batches raise on both paths.
"""

import random
from array import array

import numpy as np
import pytest

from medha_jax.executor.buckets import Bucket
from medha_jax.executor.packing import _rows, pack_batch
from medha_jax.model.inputs import _pack_groups, pack_arrays, place
from medha_jax.step_input import SeqInput, StepInput


def random_step(rng: random.Random, page_size: int, as_array: bool) -> StepInput:
    seqs = []
    for i in range(rng.randint(1, 24)):
        start = rng.choice([0, rng.randint(0, 3000)])
        n = 1 if rng.random() < 0.6 else rng.randint(1, 300)
        pages = rng.sample(range(10_000), -(-(start + n) // page_size) + rng.randint(0, 3))
        table = array("i", pages) if as_array else list(pages)
        seqs.append(SeqInput(f"r{i}", start, n, tuple(rng.randrange(32000) for _ in range(n)), (table,),
                             rng.random() < 0.8, rng.choice([0.0, 0.7, 1.3]), rng.choice([0, 40]),
                             rng.choice([1.0, 0.9]), rng.randrange(1 << 40), rng.randint(0, 500),
                             rng.choice([-1, -1, rng.randint(0, 30)]) if n == 1 else -1))
    return StepInput(tuple(seqs))


def bucket_of(step: StepInput, extra: int = 3) -> Bucket:
    return Bucket(tokens=step.num_tokens + extra, seqs=len(step.seqs) + extra, pages=step.max_pages + extra)


@pytest.mark.parametrize("seed", range(6))
def test_one_group_arrays_match_the_per_sequence_path(seed):
    rng = random.Random(seed)
    page_size = rng.choice([4, 16])
    step = random_step(rng, page_size, as_array=seed % 2 == 0)
    b = bucket_of(step)
    specs = [(s.token_ids, s.start_pos, s.page_tables, s.first_group) for s in step.seqs]
    fast = pack_arrays(specs, page_size, tokens=b.tokens, num_seqs=b.seqs, pages=b.pages)
    ref = _pack_groups(specs, page_size, tokens=b.tokens, num_seqs=b.seqs, pages=b.pages, kvp=1,
                       group_tokens=None, slots=None)
    assert fast.keys() == ref.keys()
    for k in ref:
        assert fast[k].dtype == ref[k].dtype and fast[k].shape == ref[k].shape, k
        np.testing.assert_array_equal(fast[k], ref[k], err_msg=k)


@pytest.mark.parametrize("seed", range(6))
def test_one_row_each_matches_the_per_sequence_rows(seed):
    rng = random.Random(100 + seed)
    step = random_step(rng, 16, as_array=True)
    b = bucket_of(step)
    packed = pack_batch(step, b, 16)
    specs = [(s.token_ids, s.start_pos, s.page_tables, s.first_group) for s in step.seqs]
    S = b.seqs
    sampling = dict(temperature=np.zeros((1, S), np.float32), top_k=np.zeros((1, S), np.int32),
                    top_p=np.ones((1, S), np.float32), seed=np.zeros((1, S), np.uint32),
                    step=np.zeros((1, S), np.int32), target=np.full((1, S), -1, np.int32))
    feed_index = np.full((1, b.tokens), -1, np.int32)
    out_rows = np.zeros(S, np.int32)
    logits = _rows(step, packed.cu_q_lens, place(specs, 1, None), sampling, feed_index, out_rows, 1, S)
    np.testing.assert_array_equal(packed.logits_indices, logits)
    np.testing.assert_array_equal(packed.feed_index, feed_index)
    np.testing.assert_array_equal(packed.out_rows, out_rows)
    for k, v in sampling.items():
        got = getattr(packed, k)
        assert got.dtype == v.dtype, k
        np.testing.assert_array_equal(got, v, err_msg=k)


@pytest.mark.parametrize("case", ["empty sequence", "two tables", "no table", "short table", "padding"])
def test_bad_batches_raise_on_both_paths(case):
    specs = [((5,), 10, [array("i", [3, 4, 5])]), ((1, 2, 3), 0, [[7]])]  # valid: position 10 is in page 2
    tokens, seqs, pages = 8, 4, 4
    if case == "empty sequence":
        specs.append(((), 0, [[1]]))
    elif case == "two tables":
        specs.append(((1,), 3, [[1], [2]]))
    elif case == "no table":
        specs.append(((1,), 3, []))
    elif case == "short table":
        specs.append(((1,), 40, [[1, 2]]))  # position 40 needs 11 pages of 4
    else:
        tokens = 3
    kw = dict(tokens=tokens, num_seqs=seqs, pages=pages)
    with pytest.raises(ValueError) as fast:
        pack_arrays(specs, 4, **kw)
    with pytest.raises(ValueError) as ref:
        _pack_groups(specs, 4, kvp=1, group_tokens=None, slots=None, **kw)
    assert type(fast.value) is type(ref.value)
    if case in ("empty sequence", "short table", "padding"):
        assert str(fast.value) == str(ref.value)

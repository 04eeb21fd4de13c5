"""On-device sampling against hand-computed distributions (plain numpy references)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from medha_jax.executor.sampler import SamplingArrays, sample

sample_jit = jax.jit(sample)


def _arrays(S, temperature=0.0, top_k=0, top_p=1.0, seed=0, step=None, target=-1):
    full = lambda v, dt: jnp.asarray(np.broadcast_to(np.asarray(v, dt), (S,)).copy())
    return SamplingArrays(full(temperature, np.float32), full(top_k, np.int32), full(top_p, np.float32),
                          full(seed, np.uint32), full(np.arange(S) if step is None else step, np.int32),
                          full(target, np.int32))


def test_greedy_rows_take_argmax_and_report_model_logprob():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((6, 50)).astype(np.float32)
    tok, lp, *_ = sample_jit(jnp.asarray(logits), _arrays(6))
    np.testing.assert_array_equal(np.asarray(tok), logits.argmax(-1))
    ref = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(np.asarray(lp), ref[np.arange(6), logits.argmax(-1)], rtol=1e-5, atol=1e-5)


def test_rows_with_a_target_report_the_targets_logprob_and_still_sample():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((4, 40)).astype(np.float32)
    target = np.array([7, -1, 39, 0], np.int32)  # row 1 scores its own (greedy) token
    tok, lp, top_ids, top_lps = sample_jit(jnp.asarray(logits), _arrays(4, target=target))
    ref = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    want = np.where(target >= 0, target, logits.argmax(-1))
    np.testing.assert_allclose(np.asarray(lp), ref[np.arange(4), want], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(tok), logits.argmax(-1))
    np.testing.assert_array_equal(np.asarray(top_ids)[:, 0], logits.argmax(-1))


def test_mixed_batch_greedy_row_unaffected_by_sampled_rows():
    rng = np.random.default_rng(2)
    logits = jnp.asarray(rng.standard_normal((4, 30)).astype(np.float32))
    temps = np.array([0.0, 1.0, 0.7, 0.0], np.float32)
    tok, *_ = sample_jit(logits, _arrays(4, temperature=temps))
    assert int(tok[0]) == int(jnp.argmax(logits[0])) and int(tok[3]) == int(jnp.argmax(logits[3]))


@pytest.mark.parametrize("kw", [dict(top_k=1), dict(top_p=1e-6)])
def test_top_k_1_and_tiny_top_p_are_greedy(kw):
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((16, 40)).astype(np.float32)
    tok, *_ = sample_jit(jnp.asarray(logits), _arrays(16, temperature=1.0, **kw))
    np.testing.assert_array_equal(np.asarray(tok), logits.argmax(-1))


def _draws(probs, n, **kw):
    logits = np.log(np.asarray(probs, np.float32))
    batch = jnp.asarray(np.broadcast_to(logits, (n, len(probs))).copy())
    tok, *_ = sample_jit(batch, _arrays(n, temperature=1.0, seed=7, step=np.arange(n), **kw))
    return np.bincount(np.asarray(tok), minlength=len(probs)) / n


def test_temperature_one_matches_softmax_frequencies():
    probs = [0.5, 0.3, 0.15, 0.05]
    freq = _draws(probs, 8000)
    np.testing.assert_allclose(freq, probs, atol=0.02)


def test_top_k_and_top_p_renormalise_over_the_kept_tokens():
    probs = [0.5, 0.3, 0.15, 0.05]
    np.testing.assert_allclose(_draws(probs, 8000, top_k=2), [0.625, 0.375, 0, 0], atol=0.02)
    # top_p=0.6 keeps the tokens whose more-likely mass is below 0.6: 0.5 and 0.3
    np.testing.assert_allclose(_draws(probs, 8000, top_p=0.6), [0.625, 0.375, 0, 0], atol=0.02)


def test_seed_and_step_determine_the_draw_whatever_the_batch():
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((1, 64)).astype(np.float32)
    alone, *_ = sample_jit(jnp.asarray(logits), _arrays(1, temperature=1.0, seed=123, step=[5]))
    others = rng.standard_normal((7, 64)).astype(np.float32)
    batch = jnp.asarray(np.concatenate([others[:3], logits, others[3:]]))
    seeds = np.array([1, 2, 3, 123, 4, 5, 6, 7]); steps = np.array([0, 0, 0, 5, 0, 0, 0, 0])
    together, *_ = sample_jit(batch, _arrays(8, temperature=1.0, seed=seeds, step=steps))
    assert int(alone[0]) == int(together[3])


def test_a_rows_draw_does_not_depend_on_other_rows_filtering():
    """The vocabulary is sorted only when some row filters (top-k / top-p); the noise is tied to
    token ids, so an unfiltered row draws the same token either way, and a filter that keeps
    every token (top_k = V, top_p = 1) is no filter."""
    rng = np.random.default_rng(5)
    V = 64
    rows = rng.standard_normal((4, V)).astype(np.float32)
    seeds, steps = np.array([11, 12, 13, 14]), np.array([3, 1, 4, 1])
    free, *_ = sample_jit(jnp.asarray(rows), _arrays(4, temperature=1.0, seed=seeds, step=steps))
    mixed, *_ = sample_jit(jnp.asarray(rows), _arrays(4, temperature=1.0, seed=seeds, step=steps,
                                                      top_k=np.array([0, 5, V, 0]), top_p=np.array([1.0, 1.0, 1.0, 0.5])))
    assert int(free[0]) == int(mixed[0]) and int(free[2]) == int(mixed[2])
    # the filtered rows still draw from their kept tokens only
    order = np.argsort(-rows, axis=-1, kind="stable")
    assert int(mixed[1]) in order[1, :5]
    p3 = np.exp(rows[3][order[3]] - rows[3].max()); p3 /= p3.sum()
    kept = order[3, : int(np.searchsorted(np.cumsum(p3) - p3, 0.5, side="left"))]
    assert int(mixed[3]) in kept


@pytest.mark.parametrize("V", [50, 12])
def test_top_logprobs_are_the_most_likely_tokens_of_the_model(V):
    """The K = min(20, V) most likely tokens by the model's logits (not the temperature-scaled
    ones, and whatever top-k / top-p keep), with their log-softmax values, most likely first."""
    rng = np.random.default_rng(9)
    logits = rng.standard_normal((4, V)).astype(np.float32) * 3
    arr = _arrays(4, temperature=np.array([0.0, 0.5, 1.0, 2.0], np.float32), top_k=np.array([0, 3, 0, 1]),
                  top_p=np.array([1.0, 1.0, 0.2, 1.0], np.float32))
    _, _, ids, lps = sample_jit(jnp.asarray(logits), arr)
    K = min(20, V)
    ref = logits.astype(np.float64) - np.log(np.exp(logits.astype(np.float64)).sum(-1, keepdims=True))
    want = np.argsort(-logits, axis=-1, kind="stable")[:, :K]
    np.testing.assert_array_equal(np.asarray(ids), want)
    np.testing.assert_allclose(np.asarray(lps), np.take_along_axis(ref, want, -1), atol=1e-5)

"""The model against transformers (tests/data/*/golden.json, made by tools/make_golden.py).

Every test drives `make_forward` over a tp mesh with the XLA paged-attention backend and a
shuffled page pool, so the paged cache, the slot mapping and the page table all matter:
- full-prompt prefill: last-position logits within 1e-4 of HF for tp = 1, 2, 4;
- chunked prefill (64-token chunks through the cache): same logits;
- greedy decoding one token per step: HF's exact continuation, for both config.json spellings;
- one mixed batch (prefill chunks + a decode + padding tokens and sequences).
"""

from __future__ import annotations

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from medha_jax.checkpoint import load_hf_config, load_safetensors_params
from medha_jax.model import init_kv_cache, make_forward, make_inputs
from pallas_kernels.reference import paged_attention_xla

PAGE = 16
ATOL = 1e-4


def _bucket(n: int) -> int:
    """Few shapes, few compiles (compiling costs ~1 s on the CPU, running these prompts less)."""
    return next(b for b in (64, 1024, 1536, 3072) if n <= b)


def _pool(n_tokens: int, seed: int) -> list[int]:
    """Pages for n_tokens positions, scattered over a pool twice as large."""
    need = -(-n_tokens // PAGE)
    return np.random.default_rng(seed).permutation(2 * need + 2)[:need].tolist()


class Runner:
    """One jitted forward on a mesh plus a cache big enough for the golden prompts."""

    def __init__(self, cfg, mesh, params, total_pages: int):
        self.cfg, self.params = cfg, params
        self.fwd = jax.jit(make_forward(cfg, mesh, paged_attention_xla), donate_argnums=(1, 2))
        self.k, self.v = init_kv_cache(cfg, mesh, total_pages, PAGE, jnp.float32)

    def __call__(self, seqs, pad_tokens=None, pad_seqs=None, pad_pages=None) -> np.ndarray:
        inp = make_inputs(seqs, PAGE, pad_tokens, pad_seqs, pad_pages)
        logits, self.k, self.v = self.fwd(self.params, self.k, self.v, inp)
        return np.asarray(logits)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_prefill_logits_match_hf(tp, loaded, golden):
    cfg, mesh, params = loaded("tiny-llama3", tp)
    g = golden("tiny-llama3")
    longest = max(len(p["token_ids"]) for p in g["prompts"])
    run = Runner(cfg, mesh, params, total_pages=2 * (-(-longest // PAGE)) + 2)
    for i, p in enumerate(g["prompts"]):
        ids = p["token_ids"]
        pages = _pool(len(ids), seed=i)
        logits = run([(ids, 0, pages)], pad_tokens=_bucket(len(ids)), pad_pages=_bucket(len(ids)) // PAGE)
        assert logits.shape == (1, cfg.vocab_size)
        np.testing.assert_allclose(logits[0], p["last_logits"], atol=ATOL, rtol=0,
                                   err_msg=f"tp={tp}, prompt of {len(ids)} tokens")


@pytest.mark.parametrize("variant,tp", [("tiny-llama-tied", 4), ("tiny-llama2", 2), ("tiny-llama2", 4)])
def test_prefill_other_variants(variant, tp, loaded, golden):
    """Tied embeddings + linear rope + vocab padding (510 over tp=4); MQA with kv-head copies."""
    cfg, mesh, params = loaded(variant, tp)
    g = golden(variant)
    longest = max(len(p["token_ids"]) for p in g["prompts"])
    run = Runner(cfg, mesh, params, total_pages=2 * (-(-longest // PAGE)) + 2)
    for i, p in enumerate(g["prompts"]):
        ids = p["token_ids"]
        logits = run([(ids, 0, _pool(len(ids), seed=i))], pad_tokens=_bucket(len(ids)),
                     pad_pages=_bucket(len(ids)) // PAGE)
        np.testing.assert_allclose(logits[0], p["last_logits"], atol=ATOL, rtol=0,
                                   err_msg=f"{variant} tp={tp}, prompt of {len(ids)} tokens")


@pytest.mark.parametrize("variant,prompt,tp", [("tiny-llama3", 5, 2), ("tiny-llama-tied", 3, 1)])
def test_chunked_prefill_matches_hf(variant, prompt, tp, loaded, golden):
    """Feed the prompt 64 tokens at a time; each chunk attends to the pages earlier chunks wrote."""
    cfg, mesh, params = loaded(variant, tp)
    p = golden(variant)["prompts"][prompt]
    ids, chunk = p["token_ids"], 64
    pages = _pool(len(ids), seed=7)
    run = Runner(cfg, mesh, params, total_pages=2 * len(pages) + 2)
    for start in range(0, len(ids), chunk):
        logits = run([(ids[start:start + chunk], start, pages)], pad_tokens=chunk, pad_pages=len(pages))
    assert len(ids) % chunk != 0, "the last chunk should be partial"
    np.testing.assert_allclose(logits[0], p["last_logits"], atol=ATOL, rtol=0)


def _greedy(run: Runner, ids: list[int], new_tokens: int, pages: list[int]) -> tuple[np.ndarray, list[int]]:
    """Prefill, then one token per step; returns (prompt logits, greedy continuation)."""
    first = run([(ids, 0, pages)], pad_tokens=_bucket(len(ids)), pad_pages=len(pages))
    out, logits = [], first
    for i in range(new_tokens):
        tok = int(np.argmax(logits[0]))
        out.append(tok)
        if i + 1 < new_tokens:
            logits = run([([tok], len(ids) + i, pages)], pad_tokens=1, pad_pages=len(pages))
    return first, out


@pytest.mark.parametrize("spelling", ["rope_parameters", "legacy"])
def test_greedy_decode_matches_hf(spelling, golden, tp_mesh, data_dir, tmp_path):
    """Both config.json spellings load to the same model, and greedy decoding reproduces HF's."""
    src = data_dir / "tiny-llama3"
    model_dir = tmp_path / "model"
    shutil.copytree(src, model_dir)
    if spelling == "legacy":
        shutil.copy(src / "config_legacy.json", model_dir / "config.json")
    cfg = load_hf_config(model_dir)
    assert cfg.rope_scaling["rope_type"] == "llama3" and cfg.rope_theta == 500000.0
    mesh = tp_mesh(2)
    params = load_safetensors_params(model_dir, cfg, mesh, "float32")
    g = golden("tiny-llama3")
    run = Runner(cfg, mesh, params, total_pages=64)
    for k in (1, 3):  # prompts of 7 and 300 tokens
        p = g["prompts"][k]
        pages = _pool(len(p["token_ids"]) + g["new_tokens"], seed=k)
        first, cont = _greedy(run, p["token_ids"], g["new_tokens"], pages)
        np.testing.assert_allclose(first[0], p["last_logits"], atol=ATOL, rtol=0)
        assert cont == p["greedy"], f"prompt of {len(p['token_ids'])} tokens"


def test_mixed_batch_prefill_chunks_decode_and_padding(loaded, golden):
    """Two sequences share one pool and two steps: (chunk of A, all of B) then (rest of A,
    decode of B), padded to 64 token slots and 4 sequence slots."""
    cfg, mesh, params = loaded("tiny-llama3", 2)
    g = golden("tiny-llama3")
    a, b = g["prompts"][2], g["prompts"][1]  # 33 and 7 tokens
    ia, ib = a["token_ids"], b["token_ids"]
    pages_a, pages_b = [5, 0, 3], [2, 4]  # interleaved in one pool
    run = Runner(cfg, mesh, params, total_pages=8)
    step1 = run([(ia[:20], 0, pages_a), (ib, 0, pages_b)], pad_tokens=64, pad_seqs=4, pad_pages=3)
    np.testing.assert_allclose(step1[1], b["last_logits"], atol=ATOL, rtol=0)
    assert np.all(step1[2:] == step1[2:]), "padding sequences must not produce NaN"
    tok_b = int(np.argmax(step1[1]))
    assert tok_b == b["greedy"][0]
    step2 = run([(ia[20:], 20, pages_a), ([tok_b], len(ib), pages_b)], pad_tokens=64, pad_seqs=4, pad_pages=3)
    np.testing.assert_allclose(step2[0], a["last_logits"], atol=ATOL, rtol=0)
    assert int(np.argmax(step2[1])) == b["greedy"][1]

"""The embedded "demo" model: deterministic, mesh-independent, offline, byte-level tokenizer."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np

from medha_jax.checkpoint import load_model
from medha_jax.demo_model import BOS_ID, DEMO_CONFIG, EOT_ID, byte_tokenizer, load_demo
from medha_jax.model import init_kv_cache, make_forward, make_inputs
from pallas_kernels.reference import paged_attention_xla

PAGE = 8


def _logits(mesh, params, ids, chunk=None, dtype=jnp.float32):
    fwd = jax.jit(make_forward(DEMO_CONFIG, mesh, paged_attention_xla))
    k, v = init_kv_cache(DEMO_CONFIG, mesh, 16, PAGE, dtype)
    pages = list(range(15, -1, -1))
    chunk = chunk or len(ids)
    for s in range(0, len(ids), chunk):
        logits, k, v = fwd(params, k, v, make_inputs([(ids[s:s + chunk], s, pages)], PAGE, pad_tokens=chunk))
    return np.asarray(logits[0])


def test_demo_is_the_same_model_on_every_mesh_and_in_chunks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tok = byte_tokenizer()
    ids = tok.encode("The demo model runs with no files at all. " * 2)
    m1 = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1, 1), ("kvp", "spp", "tp"))
    m4 = jax.sharding.Mesh(np.array(jax.devices()[:4]).reshape(1, 1, 4), ("kvp", "spp", "tp"))
    cfg, p1, _ = load_demo(m1)
    _, p1b, _ = load_demo(m1)
    _, p4, _ = load_demo(m4)
    assert cfg is DEMO_CONFIG and cfg.rope_type == "llama3"
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), p1, p1b)
    ref = _logits(m1, p1, ids)
    assert np.isfinite(ref).all() and ref.std() > 0.1
    np.testing.assert_allclose(_logits(m4, p4, ids, chunk=16), ref, atol=1e-4)  # tp=4, in chunks
    assert os.listdir(tmp_path) == [], "the demo model must write nothing"


def test_demo_bfloat16_and_load_model_entry_point():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]).reshape(1, 1, 2), ("kvp", "spp", "tp"))
    cfg, p32, tok = load_model("demo", mesh, "float32")
    _, p16, _ = load_model("demo", mesh, "bfloat16")
    assert p16["layers"]["wq"].dtype == jnp.bfloat16 and p32["layers"]["wq"].dtype == jnp.float32
    ids = tok.encode("bf16 should stay close")
    a, b = _logits(mesh, p32, ids), _logits(mesh, p16, ids, dtype=jnp.bfloat16)
    assert np.abs(a - b).max() < 0.1 * np.abs(a).max()
    _, other, _ = load_model("demo", mesh, "float32", seed=1)
    assert not np.array_equal(np.asarray(other["embed"]), np.asarray(p32["embed"]))


def test_byte_tokenizer_round_trip_and_specials():
    tok = byte_tokenizer()
    text = "héllo  wörld\t東京 🙂\n"
    ids = tok.encode(text)
    assert ids[0] == BOS_ID and ids[1:] == list(text.encode("utf-8"))
    assert tok.decode(ids) == text
    assert tok.vocab_size == DEMO_CONFIG.vocab_size
    assert EOT_ID in tok.eos_token_ids and set(tok.eos_token_ids) == set(DEMO_CONFIG.eos_token_ids)
    assert tok.encode("a", add_special_tokens=False) == [97]
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert chat.startswith("<|begin_of_text|><|start_header_id|>user") and chat.endswith("\n\n")

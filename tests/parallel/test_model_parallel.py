"""`make_forward` (one batch through every stage, KVP merge) on spp/kvp meshes equals transformers.

The 1000-token golden prompt goes through the model in 256-token chunks (some straddling two
kvp blocks, so part of a chunk's K/V is written on another group than the one running it), its
first block on group 1 where there are kvp groups; with kvp groups of M
positions, later chunks write their KV to later groups and attend over every group's pages.
Last-position logits within 1e-4 of HF, as the tp-only model tests require.
"""

import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from medha_jax.checkpoint import load_hf_config, load_safetensors_params
from medha_jax.mesh import make_mesh, mesh_size
from medha_jax.model import init_kv_cache, make_forward, make_inputs
from pallas_kernels.reference import paged_attention_xla

PAGE, CHUNK = 16, 256
DATA = Path(__file__).resolve().parent.parent / "data" / "tiny-llama3"


@pytest.mark.parametrize("spec,group_tokens,first_group", [("spp=2", None, 0), ("kvp=3", 384, 1),
                                                           ("tp=2,spp=2,kvp=2", 512, 1)])
def test_chunked_prefill_on_parallel_meshes_matches_hf(spec, group_tokens, first_group):
    mesh = make_mesh(spec, devices=jax.devices()[: mesh_size(spec)])
    kvp = mesh.shape["kvp"]
    cfg = load_hf_config(DATA)
    params = load_safetensors_params(DATA, cfg, mesh, "float32")
    p = next(p for p in json.loads((DATA / "golden.json").read_text())["prompts"] if len(p["token_ids"]) == 1000)
    ids = p["token_ids"]
    per_group = (group_tokens or 1024) // PAGE
    k, v = init_kv_cache(cfg, mesh, 2 * per_group * kvp, PAGE, jnp.float32)
    pool = [list(np.random.default_rng(g).permutation(2 * per_group)[:per_group]) for g in range(kvp)]
    fwd = jax.jit(make_forward(cfg, mesh, paged_attention_xla), donate_argnums=(1, 2))
    for start in range(0, len(ids), CHUNK):
        end = min(start + CHUNK, len(ids))
        if kvp == 1:
            pages, row = pool[0][: -(-end // PAGE)], 0
        else:  # block b = positions [b*M, (b+1)*M) on group (first_group + b) % kvp, which runs its tokens
            pages = [pool[(first_group + b) % kvp][: -(-min(end - b * group_tokens, group_tokens) // PAGE)]
                     for b in range(-(-end // group_tokens))]
            row = (first_group + (end - 1) // group_tokens) % kvp  # one sequence slot per group's batch
        inp = make_inputs([(ids[start:end], start, pages, first_group)], PAGE, pad_tokens=CHUNK, pad_pages=per_group,
                          kvp=kvp, group_tokens=group_tokens)
        logits, k, v = fwd(params, k, v, inp)
    assert kvp == 1 or len(pages) == kvp  # the prompt reached every group
    assert logits.shape == (kvp, cfg.vocab_size)
    np.testing.assert_allclose(np.asarray(logits[row]), p["last_logits"], atol=1e-4, rtol=0)

"""Per-layer weight buffers (`sharding.unstack_layers`, what the executor runs on one CPU stage):
the same values and shardings as the stack, the same step outputs, and no weight copied out of a
stack in the compiled step."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from medha_jax.demo_model import DEMO_CONFIG, load_demo
from medha_jax.mesh import make_mesh
from medha_jax.model import init_kv_cache, make_inputs, sharding
from medha_jax.model.pipeline_step import make_step
from pallas_kernels.reference import paged_attention_xla

L, F, D = DEMO_CONFIG.num_layers, DEMO_CONFIG.intermediate_size, DEMO_CONFIG.hidden_size


def _batch():
    """A 20-token prefill and a 5-token one, pages of 16; stacked for the tick (one stage)."""
    inp = make_inputs([(list(range(3, 23)), 0, [0, 1]), ([7, 8, 9, 10, 11], 0, [2])], 16, pad_tokens=32, pad_seqs=4)
    inp = jax.tree.map(lambda a: a[None], inp)  # [spp=1, kvp=1, ...]
    return inp, -jnp.ones((1, 32), jnp.int32), jnp.zeros((4,), jnp.int32)


def test_unstack_keeps_every_layers_values_and_sharding():
    mesh = make_mesh({"tp": 2}, devices=jax.devices()[:2])
    _, params, _ = load_demo(mesh)
    per = sharding.unstack_layers(params, DEMO_CONFIG, mesh)
    assert isinstance(per["layers"], list) and len(per["layers"]) == L
    assert per["embed"] is params["embed"]
    for i, lp in enumerate(per["layers"]):
        assert set(lp) == set(params["layers"])
        for k, a in lp.items():
            np.testing.assert_array_equal(np.asarray(a), np.asarray(params["layers"][k][i]))
            assert a.sharding.spec == sharding.spec(sharding.PARAM_AXES["layers"][k][1:]), k


def test_unstack_refuses_a_pipeline_mesh():
    mesh = make_mesh({"spp": 2}, devices=jax.devices()[:2])
    _, params, _ = load_demo(mesh)
    with pytest.raises(ValueError, match="spp=1"):
        sharding.unstack_layers(params, DEMO_CONFIG, mesh)


@pytest.mark.parametrize("unroll", [1, L], ids=["loop", "unrolled"])
def test_per_layer_step_equals_the_stacked_step(unroll):
    """Both the loop (a switch per projection) and the unrolled form; tp=2 so the psums run too."""
    mesh = make_mesh({"tp": 2}, devices=jax.devices()[:2])
    _, params, _ = load_demo(mesh)
    per = sharding.unstack_layers(params, DEMO_CONFIG, mesh)
    inp, feed, prev = _batch()
    outs = []
    for p, per_layer in ((params, False), (per, True)):
        step = jax.jit(make_step(DEMO_CONFIG, mesh, paged_attention_xla, unroll, per_layer))
        k, v = init_kv_cache(DEMO_CONFIG, mesh, 8, 16, jnp.float32)
        logits, k, v, _ = step(p, k, v, None, inp, feed, prev)
        outs.append((np.asarray(logits), np.asarray(k), np.asarray(v)))
    for a, b in zip(*outs):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)
    assert np.abs(outs[0][0]).max() > 0 and np.abs(outs[0][1]).max() > 0  # something was computed and written


def test_per_layer_step_copies_no_weights():
    """The stacked loop slices w_gate [F, D] (tp=1) out of its [L, F, D] stack every layer; the
    per-layer loop reads each layer's own buffer."""
    mesh = make_mesh({"tp": 1}, devices=jax.devices()[:1])
    _, params, _ = load_demo(mesh)
    inp, feed, prev = _batch()
    k, v = init_kv_cache(DEMO_CONFIG, mesh, 8, 16, jnp.float32)

    def hlo(p, per_layer):
        step = jax.jit(make_step(DEMO_CONFIG, mesh, paged_attention_xla, 1, per_layer))
        return step.lower(p, k, v, None, inp, feed, prev).compile().as_text().splitlines()

    def weight_copies(lines):
        return [ln.strip()[:160] for ln in lines if f"f32[1,{F},{D}]" in ln or f"f32[{F},{D}]" in ln
                if any(op in ln for op in (" copy(", "dynamic-slice(", " slice(", "dynamic-slice_"))]

    assert weight_copies(hlo(params, False))  # the pattern bites: the stack's slices
    per = hlo(sharding.unstack_layers(params, DEMO_CONFIG, mesh), True)
    assert not weight_copies(per), "\n".join(weight_copies(per))
    assert any("conditional(" in ln for ln in per)

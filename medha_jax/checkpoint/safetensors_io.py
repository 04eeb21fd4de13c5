"""HF safetensors -> sharded params, reading only each device's slice.

Data flow: model dir -> `TensorIndex` (tensor name -> file, from model.safetensors.index.json or
the *.safetensors files themselves) -> check every tensor the config needs exists with the
expected shape -> per parameter `jax.make_array_from_callback(global_shape, sharding, cb)`,
where cb(index) reads just that shard through `safe_open(...).get_slice(name)[...]`, converts
HF's [out, in] Linear layout to ours, stacks the layers of the shard, applies kv-head copies
and vocab padding (`sharding.Layout`) and casts to the requested dtype. The whole model is never
materialised on one device or in host memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import jax
import ml_dtypes  # noqa: F401  (registers bfloat16 with numpy so safetensors can read bf16)
import numpy as np
from jax.sharding import Mesh
from safetensors import safe_open

from medha_jax.model import sharding
from medha_jax.model.config import LlamaConfig

INDEX_FILE = "model.safetensors.index.json"


class MissingTensorError(KeyError):
    """A tensor the config needs is not in the checkpoint (str() is the plain message)."""

    def __str__(self) -> str:
        return str(self.args[0])


class TensorIndex:
    """Tensor name -> safetensors file of one HF model directory; files opened lazily."""

    def __init__(self, model_dir: str | Path):
        self.dir = Path(model_dir)
        if not self.dir.is_dir():
            raise FileNotFoundError(f"model directory {str(model_dir)!r} does not exist")
        index = self.dir / INDEX_FILE
        if index.is_file():
            weight_map = json.loads(index.read_text()).get("weight_map")
            if not isinstance(weight_map, dict):
                raise ValueError(f"{index} has no 'weight_map'")
            files = sorted(set(weight_map.values()))
            for f in files:
                if not (self.dir / f).is_file():
                    raise FileNotFoundError(f"{INDEX_FILE} names shard {f!r}, which is missing from {self.dir}")
            self.file_of = dict(weight_map)
        else:
            files = sorted(p.name for p in self.dir.glob("*.safetensors"))
            if not files:
                raise FileNotFoundError(
                    f"no model.safetensors or {INDEX_FILE} in model directory {str(self.dir)!r}")
            self.file_of = {}
            for f in files:
                with safe_open(self.dir / f, framework="numpy") as h:
                    for name in h.keys():
                        self.file_of[name] = f
        self._handles: dict[str, Any] = {}

    def _handle(self, name: str):
        if name not in self.file_of:
            raise MissingTensorError(f"tensor {name!r} not found in the checkpoint at {self.dir}")
        f = self.file_of[name]
        if f not in self._handles:
            self._handles[f] = safe_open(self.dir / f, framework="numpy")
        return self._handles[f]

    def __contains__(self, name: str) -> bool:
        return name in self.file_of

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._handle(name).get_slice(name).get_shape())

    def read(self, name: str, *idx: slice) -> np.ndarray:
        """The slice [idx] of tensor `name`, as numpy, in its stored dtype."""
        return self._handle(name).get_slice(name)[idx if len(idx) > 1 else idx[0]]

    def close(self) -> None:
        for h in self._handles.values():
            if hasattr(h, "__exit__"):
                h.__exit__(None, None, None)
        self._handles.clear()


def _layer_name(i: int, suffix: str) -> str:
    return f"model.layers.{i}.{suffix}"


# Our layer param -> (HF suffix, HF shape given cfg)
_LAYER_TENSORS: dict[str, tuple[str, Callable[[LlamaConfig], tuple[int, ...]]]] = {
    "attn_norm": ("input_layernorm.weight", lambda c: (c.hidden_size,)),
    "mlp_norm": ("post_attention_layernorm.weight", lambda c: (c.hidden_size,)),
    "wq": ("self_attn.q_proj.weight", lambda c: (c.num_heads * c.head_dim, c.hidden_size)),
    "wk": ("self_attn.k_proj.weight", lambda c: (c.num_kv_heads * c.head_dim, c.hidden_size)),
    "wv": ("self_attn.v_proj.weight", lambda c: (c.num_kv_heads * c.head_dim, c.hidden_size)),
    "wo": ("self_attn.o_proj.weight", lambda c: (c.hidden_size, c.num_heads * c.head_dim)),
    "w_gate": ("mlp.gate_proj.weight", lambda c: (c.intermediate_size, c.hidden_size)),
    "w_up": ("mlp.up_proj.weight", lambda c: (c.intermediate_size, c.hidden_size)),
    "w_down": ("mlp.down_proj.weight", lambda c: (c.hidden_size, c.intermediate_size)),
}


def check_tensors(index: TensorIndex, cfg: LlamaConfig) -> None:
    """Every tensor cfg needs exists with HF's shape; raise naming the first problem."""
    V, D = cfg.vocab_size, cfg.hidden_size
    expected = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not cfg.tie_word_embeddings:
        expected["lm_head.weight"] = (V, D)
    for i in range(cfg.num_layers):
        for suffix, shape in _LAYER_TENSORS.values():
            expected[_layer_name(i, suffix)] = shape(cfg)
    for name, shape in expected.items():
        if name not in index:
            hint = " (config says tie_word_embeddings=false)" if name == "lm_head.weight" else ""
            raise MissingTensorError(f"checkpoint at {index.dir} lacks tensor {name!r}{hint}")
        got = index.shape(name)
        if got != shape:
            raise ValueError(f"tensor {name!r} has shape {list(got)}, config.json implies {list(shape)}")


def _bounds(s: slice, n: int) -> tuple[int, int]:
    start, stop, step = s.indices(n)
    assert step == 1, "shards are contiguous"
    return start, stop


def _reader(index: TensorIndex, cfg: LlamaConfig, lay: sharding.Layout, key: str):
    """cb(global_index) -> numpy shard of our param `key` (HF layout converted to ours)."""
    Dh, r, V = cfg.head_dim, lay.kv_repeat, cfg.vocab_size

    if key in ("embed", "lm_head"):
        name = "model.embed_tokens.weight" if key == "embed" else "lm_head.weight"

        def read_vocab(idx):  # [Vp, D] rows beyond V are zero padding
            (r0, r1), cs = _bounds(idx[0], lay.vocab_padded), idx[1]
            rows = index.read(name, slice(min(r0, V), min(r1, V)), cs)
            return np.pad(rows, ((0, (r1 - r0) - rows.shape[0]), (0, 0)))
        return read_vocab
    if key == "final_norm":
        return lambda idx: index.read("model.norm.weight", idx[0])

    suffix = _LAYER_TENSORS[key][0]

    def one_layer(i: int, idx) -> np.ndarray:
        name = _layer_name(i, suffix)
        if key in ("attn_norm", "mlp_norm"):
            return index.read(name, idx[0])
        # HF stores every linear weight [out, in], as we do (`sharding.PARAM_AXES`): only the
        # head split and the kv-head copies change the shape
        if key == "wq":  # HF [H*Dh, D] -> [H, Dh, D]
            (h0, h1), ds = _bounds(idx[0], cfg.num_heads), idx[2]
            w = index.read(name, slice(h0 * Dh, h1 * Dh), ds)  # w: [nh*Dh, nd]
            return w.reshape(h1 - h0, Dh, -1)[:, idx[1], :]
        if key in ("wk", "wv"):  # HF [KVH*Dh, D] -> [KVHr, Dh, D]; copy g reads head g // r
            (g0, g1), ds = _bounds(idx[0], lay.kv_heads), idx[2]
            s0, s1 = g0 // r, (g1 - 1) // r + 1
            w = index.read(name, slice(s0 * Dh, s1 * Dh), ds).reshape(s1 - s0, Dh, -1)
            return w[np.arange(g0, g1) // r - s0][:, idx[1], :]  # [n_copies, Dh, nd]
        if key == "wo":  # HF [D, H*Dh] -> [D, H, Dh]
            ds, (h0, h1) = idx[0], _bounds(idx[1], cfg.num_heads)
            w = index.read(name, ds, slice(h0 * Dh, h1 * Dh))  # w: [nd, nh*Dh]
            return w.reshape(w.shape[0], h1 - h0, Dh)[:, :, idx[2]]
        if key in ("w_gate", "w_up", "w_down"):  # HF [F, D] / [D, F]: ours as they are
            return index.read(name, idx[0], idx[1])
        raise KeyError(key)

    def read_layers(idx):
        l0, l1 = _bounds(idx[0], cfg.num_layers)
        return np.stack([one_layer(i, idx[1:]) for i in range(l0, l1)])
    return read_layers


def load_safetensors_params(model_dir: str | Path, cfg: LlamaConfig, mesh: Mesh, dtype=np.float32):
    """Params for `cfg` from the HF checkpoint in model_dir, as arrays in `param_shardings`."""
    np_dtype = np.dtype(jax.numpy.dtype(dtype))  # accepts "float32", "bfloat16", jnp dtypes
    lay = sharding.layout(cfg, mesh)
    index = TensorIndex(model_dir)
    try:
        check_tensors(index, cfg)
        shapes = sharding.param_shapes(cfg, lay)
        shards = sharding.param_shardings(cfg, mesh)

        def build(key: str, shape, shd):
            read = _reader(index, cfg, lay, key)
            return jax.make_array_from_callback(
                shape, shd, lambda idx: np.ascontiguousarray(read(idx)).astype(np_dtype))

        params = {k: build(k, shapes[k], shards[k]) for k in shapes if k != "layers"}
        params["layers"] = {k: build(k, shapes["layers"][k], shards["layers"][k])
                            for k in shapes["layers"]}
    finally:
        index.close()
    return params

"""Save / restore converted params with Orbax, restoring straight into the mesh's shardings.

Data flow: save: params (in `param_shardings`) -> `<dir>/params` (Orbax StandardCheckpointer,
each host writes its shards) + `<dir>/medha_config.json` (the LlamaConfig and the Layout the
arrays were saved with). restore: medha_config.json -> cfg -> target ShapeDtypeStructs with this
mesh's shardings -> Orbax reads each device's shard (a checkpoint saved before `weight_layout` was
recorded: its [in, out] layer weights are read as saved, then transposed into the mesh's shardings).

The arrays are stored in the mesh layout (kv heads copied when tp > num_kv_heads, vocab padded
to a multiple of tp), so a checkpoint restores onto any mesh whose `Layout.kv_heads` and
`vocab_padded` match, whatever its tp/spp/kvp; otherwise restore raises naming both layouts
(re-convert from the HF checkpoint in that case).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import orbax.checkpoint as ocp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from medha_jax.model import sharding
from medha_jax.model.config import LlamaConfig

META_FILE = "medha_config.json"
PARAMS_DIR = "params"
WEIGHT_LAYOUT = "out_in"
"""How linear weights are stored (`sharding.PARAM_AXES`: output features first). Checkpoints
saved before it was recorded hold them [in, out]; `restore_params` transposes those on restore
(`sharding.FROM_IN_OUT`)."""


def save_params(path: str | Path, cfg: LlamaConfig, params, mesh: Mesh) -> None:
    """Write params (and cfg) to a new directory `path`; refuses to overwrite an existing one."""
    path = Path(path).absolute()
    if path.exists():
        raise FileExistsError(f"checkpoint directory {str(path)!r} already exists")
    lay = sharding.layout(cfg, mesh)
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(path / PARAMS_DIR, params)
        ckpt.wait_until_finished()
    if jax.process_index() == 0:
        meta = {"config": dataclasses.asdict(cfg), "kv_heads": lay.kv_heads,
                "vocab_padded": lay.vocab_padded, "weight_layout": WEIGHT_LAYOUT}
        (path / META_FILE).write_text(json.dumps(meta, indent=2) + "\n")


def load_saved_config(path: str | Path) -> tuple[LlamaConfig, dict]:
    """(cfg, meta) of a checkpoint written by `save_params`."""
    meta_path = Path(path) / META_FILE
    if not meta_path.is_file():
        raise FileNotFoundError(f"{str(path)!r} is not a medha-jax params checkpoint (no {META_FILE})")
    meta = json.loads(meta_path.read_text())
    return LlamaConfig(**meta["config"]), meta


def restore_params(path: str | Path, mesh: Mesh, dtype=None):
    """(cfg, params) from `path`, each array restored in `param_shardings(cfg, mesh)`.

    dtype: cast while restoring (None keeps the saved dtype).
    """
    path = Path(path).absolute()
    cfg, meta = load_saved_config(path)
    lay = sharding.layout(cfg, mesh)
    in_out = "weight_layout" not in meta  # saved by a release that stored linear weights [in, out]
    if not in_out and meta["weight_layout"] != WEIGHT_LAYOUT:
        raise ValueError(f"checkpoint {str(path)!r} stores its weights as {meta['weight_layout']!r}, which "
                         f"this release does not know (it reads {WEIGHT_LAYOUT!r} and older [in, out] ones)")
    if (lay.kv_heads, lay.vocab_padded) != (meta["kv_heads"], meta["vocab_padded"]):
        raise ValueError(
            f"checkpoint {str(path)!r} was saved with {meta['kv_heads']} kv heads and vocab padded "
            f"to {meta['vocab_padded']}; this mesh needs {lay.kv_heads} and {lay.vocab_padded} "
            "(tp changed the kv-head copies or padding): convert from the HF checkpoint instead")
    shapes = sharding.param_shapes(cfg, lay)
    shardings = sharding.param_shardings(cfg, mesh)
    with ocp.StandardCheckpointer() as ckpt:
        saved = ckpt.metadata(path / PARAMS_DIR)
        saved_tree = getattr(saved, "item_metadata", saved)
        saved_tree = getattr(saved_tree, "tree", saved_tree)

        def target(shape, shd, meta_leaf):
            return jax.ShapeDtypeStruct(shape, dtype or meta_leaf.dtype, sharding=shd)

        abstract = jax.tree.map(target, shapes, shardings, dict(saved_tree),
                                is_leaf=lambda x: isinstance(x, tuple))
        if in_out:  # read each layer weight as it was saved, in the matching sharding
            abstract["layers"] = {k: _as_saved(a, sharding.FROM_IN_OUT.get(k)) for k, a in abstract["layers"].items()}
        params = ckpt.restore(path / PARAMS_DIR, abstract)
    if in_out:
        params["layers"] = {k: a if k not in sharding.FROM_IN_OUT else jax.jit(
            lambda x, p=sharding.FROM_IN_OUT[k]: x.transpose(p), out_shardings=shardings["layers"][k])(a)
            for k, a in params["layers"].items()}
    return cfg, params


def _as_saved(target: jax.ShapeDtypeStruct, perm) -> jax.ShapeDtypeStruct:
    """The [in, out] form of an [out, in] target (shape and sharding spec permuted back); perm None: as is."""
    if perm is None:
        return target
    inv = sorted(range(len(perm)), key=perm.__getitem__)  # old axis j is new axis inv[j]
    spec = tuple(target.sharding.spec) + (None,) * (len(perm) - len(target.sharding.spec))
    shd = NamedSharding(target.sharding.mesh, P(*(spec[i] for i in inv)))
    return jax.ShapeDtypeStruct(tuple(target.shape[i] for i in inv), target.dtype, sharding=shd)

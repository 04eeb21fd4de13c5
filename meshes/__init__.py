"""Named device-mesh presets for real deployments: `--mesh preset:NAME` loads meshes/NAME.json.

Each JSON file describes one deployment: the model it is sized for, nodes x GPUs per node, the
mesh degrees {"tp", "spp", "kvp"} (tp inside a node, spp and kvp across nodes) and optionally
`max_tokens_per_kvp_group` (the progressive-KVP group size the engine uses unless the user sets
one). `load_preset(name)` validates it; `medha_jax.mesh.parse_mesh("preset:NAME")` and the engine
builder use it. See README.md here for the table of presets. Pure Python, no JAX.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DIR = Path(__file__).resolve().parent
PREFIX = "preset:"
_AXES = ("kvp", "spp", "tp")


@dataclass(frozen=True, slots=True)
class MeshPreset:
    name: str
    description: str
    model: str
    nodes: int
    gpus_per_node: int
    mesh: dict[str, int]
    max_tokens_per_kvp_group: int | None = None
    source: str = ""

    @property
    def spec(self) -> str:
        """The mesh as the CLI writes it, e.g. "tp=8,spp=4,kvp=2"."""
        return ",".join(f"{a}={self.mesh[a]}" for a in ("tp", "spp", "kvp"))


def list_presets() -> list[str]:
    return sorted(p.stem for p in DIR.glob("*.json"))


def load_preset(name: str) -> MeshPreset:
    """The preset meshes/<name>.json ("preset:" prefix allowed); ValueError naming the valid ones."""
    name = name[len(PREFIX):] if name.startswith(PREFIX) else name
    path = DIR / f"{name}.json"
    if "/" in name or not path.is_file():
        raise ValueError(f"unknown mesh preset {name!r}; presets: {', '.join(list_presets())}")
    data = json.loads(path.read_text())
    mesh = {a: int(data["mesh"].get(a, 1)) for a in _AXES}
    if set(data["mesh"]) - set(_AXES) or min(mesh.values()) < 1:
        raise ValueError(f"mesh preset {name!r}: mesh must map {_AXES} to positive degrees, got {data['mesh']}")
    n = mesh["tp"] * mesh["spp"] * mesh["kvp"]
    if n != data["nodes"] * data["gpus_per_node"]:
        raise ValueError(f"mesh preset {name!r}: the mesh has {n} devices but {data['nodes']} nodes x "
                         f"{data['gpus_per_node']} GPUs is {data['nodes'] * data['gpus_per_node']}")
    return MeshPreset(name=name, description=data["description"], model=data["model"], nodes=data["nodes"],
                      gpus_per_node=data["gpus_per_node"], mesh=mesh,
                      max_tokens_per_kvp_group=data.get("max_tokens_per_kvp_group"), source=data.get("source", ""))

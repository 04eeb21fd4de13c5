"""Device mesh from text: "tp=2,spp=1,kvp=1" -> Mesh(devices, ("kvp", "spp", "tp")).

"preset:NAME" names a deployment preset in meshes/ (`meshes.load_preset`).

Data flow: `parse_mesh(text)` -> {"kvp": k, "spp": s, "tp": t} (missing axes are 1)
-> `make_mesh(spec, devices=None)` reshapes the devices to (kvp, spp, tp), tp innermost so
tensor-parallel collectives use the closest devices. Strict: the product of the degrees must
equal the number of devices used; pass `devices=jax.devices()[:n]` to use a subset.
"""

from __future__ import annotations

import math
import re
from typing import Mapping, Sequence

import numpy as np

MESH_AXES = ("kvp", "spp", "tp")
_ITEM = re.compile(r"^\s*([A-Za-z_]+)\s*=\s*([+-]?\d+)\s*$")


def parse_mesh(text: str) -> dict[str, int]:
    """"tp=2,spp=1" -> {"kvp": 1, "spp": 1, "tp": 2}. Raises ValueError naming the problem."""
    if not isinstance(text, str):
        raise ValueError(f"mesh spec must be a string like 'tp=2,spp=1,kvp=1', got {text!r}")
    if text.strip().startswith("preset:"):
        from meshes import load_preset

        return dict(load_preset(text.strip()).mesh)
    out = {a: 1 for a in MESH_AXES}
    seen: set[str] = set()
    if not text.strip():
        return out
    for item in text.split(","):
        m = _ITEM.match(item)
        if not m:
            raise ValueError(f"malformed mesh spec item {item.strip()!r} in {text!r}; "
                             "expected axis=degree, e.g. 'tp=2,spp=1,kvp=1'")
        axis, degree = m.group(1), int(m.group(2))
        if axis not in MESH_AXES:
            raise ValueError(f"unknown mesh axis {axis!r} in {text!r}; axes are {', '.join(MESH_AXES)}")
        if axis in seen:
            raise ValueError(f"mesh axis {axis!r} given twice in {text!r}")
        if degree <= 0:
            raise ValueError(f"mesh axis {axis} must have a positive degree, got {degree}")
        seen.add(axis)
        out[axis] = degree
    return out


def mesh_size(spec: str | Mapping[str, int]) -> int:
    """Number of devices the spec needs."""
    return math.prod(_degrees(spec).values())


def make_mesh(spec: str | Mapping[str, int], devices: Sequence | None = None):
    """Mesh(devices, ("kvp", "spp", "tp")); devices default to all of jax.devices()."""
    import jax
    from jax.sharding import Mesh

    degrees = _degrees(spec)
    devs = list(jax.devices() if devices is None else devices)
    need = math.prod(degrees.values())
    if need != len(devs):
        shown = ",".join(f"{a}={degrees[a]}" for a in MESH_AXES)
        have = f"this host has {len(devs)}" if devices is None else f"{len(devs)} were given"
        fix = "lower the degrees" if need > len(devs) else "make the product of the degrees equal the device count"
        raise ValueError(f"mesh {shown} needs {need} devices but {have}; {fix}")
    grid = np.array(devs, dtype=object).reshape(tuple(degrees[a] for a in MESH_AXES))
    return Mesh(grid, MESH_AXES)


def _degrees(spec: str | Mapping[str, int]) -> dict[str, int]:
    if isinstance(spec, str):
        return parse_mesh(spec)
    unknown = set(spec) - set(MESH_AXES)
    if unknown:
        raise ValueError(f"unknown mesh axes {sorted(unknown)}; axes are {', '.join(MESH_AXES)}")
    out = {a: spec.get(a, 1) for a in MESH_AXES}
    for a, d in out.items():
        if not isinstance(d, int) or isinstance(d, bool) or d <= 0:
            raise ValueError(f"mesh axis {a} must have a positive integer degree, got {d!r}")
    return out

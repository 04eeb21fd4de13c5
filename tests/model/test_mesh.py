"""parse_mesh / make_mesh: axis order, defaults and the errors users will see."""

from __future__ import annotations

import jax
import pytest

from medha_jax.mesh import make_mesh, mesh_size, parse_mesh


def test_parse_defaults_and_order():
    assert parse_mesh("tp=2") == {"kvp": 1, "spp": 1, "tp": 2}
    assert parse_mesh(" kvp=2 , tp=4,spp=1 ") == {"kvp": 2, "spp": 1, "tp": 4}
    assert parse_mesh("") == {"kvp": 1, "spp": 1, "tp": 1}
    assert mesh_size("tp=2,kvp=2,spp=2") == 8


@pytest.mark.parametrize("text,needle", [
    ("tp=2,dp=2", "unknown mesh axis 'dp'"),
    ("tp=0", "positive degree"),
    ("tp=-2", "positive degree"),
    ("tp2", "malformed"),
    ("tp=two", "malformed"),
    ("tp=2,,spp=1", "malformed"),
    ("tp=2,tp=4", "given twice"),
])
def test_parse_errors(text, needle):
    with pytest.raises(ValueError, match=needle):
        parse_mesh(text)


def test_make_mesh_shape_and_tp_innermost():
    devs = jax.devices()
    if len(devs) < 8:
        pytest.skip("needs 8 host devices")
    mesh = make_mesh("tp=2,spp=2,kvp=2")
    assert mesh.axis_names == ("kvp", "spp", "tp")
    assert dict(mesh.shape) == {"kvp": 2, "spp": 2, "tp": 2}
    # tp neighbours are consecutive devices
    assert [d.id for d in mesh.devices[0, 0, :]] == [devs[0].id, devs[1].id]
    sub = make_mesh({"tp": 4}, devices=devs[:4])
    assert sub.devices.size == 4


def test_make_mesh_device_count_mismatch_says_how_many():
    n = len(jax.devices())
    with pytest.raises(ValueError, match=f"needs {2 * n} devices but this host has {n}"):
        make_mesh(f"tp={2 * n}")
    with pytest.raises(ValueError, match="needs 1 devices but 2 were given"):
        make_mesh("tp=1", devices=jax.devices()[:2] if n >= 2 else [jax.devices()[0]] * 2)
    with pytest.raises(ValueError, match="unknown mesh axes"):
        make_mesh({"dp": 2})

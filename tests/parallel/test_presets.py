"""Mesh presets in meshes/: loadable by name, consistent with their node counts, usable as --mesh."""

import pytest

from medha_jax.config import EngineConfig
from medha_jax.mesh import mesh_size, parse_mesh
from medha_jax.serve import parse_configs
from meshes import list_presets, load_preset


def test_every_preset_loads_and_fits_its_nodes():
    names = list_presets()
    assert {"llama3-8b-1node", "llama3-8b-2node", "llama3-70b-4node", "llama3-70b-16node"} <= set(names)
    for name in names:
        p = load_preset(name)
        assert mesh_size(p.spec) == p.nodes * p.gpus_per_node
        assert p.mesh["tp"] <= p.gpus_per_node  # tensor parallelism stays inside a node
        assert parse_mesh(f"preset:{name}") == p.mesh


def test_preset_values():
    p = load_preset("preset:llama3-70b-8node")
    assert p.spec == "tp=8,spp=4,kvp=2" and p.max_tokens_per_kvp_group == 1 << 20
    assert load_preset("llama3-8b-16node").mesh == {"kvp": 4, "spp": 4, "tp": 8}


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(ValueError, match="llama3-8b-1node"):
        parse_mesh("preset:nope")


def test_cli_takes_presets_and_3d_meshes_and_multihost_flags():
    e, *_ = parse_configs(["--mesh", "preset:llama3-70b-16node"])
    assert e.mesh == "preset:llama3-70b-16node"
    e, *_ = parse_configs(["--mesh", "tp=2,spp=2,kvp=2", "--max-tokens-per-kvp-group", "1024", "--multihost",
                           "--coordinator-address", "127.0.0.1:1234", "--num-processes", "2", "--process-id", "1"])
    assert (e.mesh, e.max_tokens_per_kvp_group, e.multihost, e.coordinator_address, e.num_processes,
            e.process_id) == ("tp=2,spp=2,kvp=2", 1024, True, "127.0.0.1:1234", 2, 1)


@pytest.mark.parametrize("kw,needle", [
    (dict(max_tokens_per_kvp_group=100), "multiple of page_size"),
    (dict(process_id=1), "need multihost"),
    (dict(multihost=True, num_processes=2, process_id=2), "process_id"),
])
def test_bad_parallel_settings_name_the_problem(kw, needle):
    with pytest.raises(ValueError, match=needle):
        EngineConfig(**kw)

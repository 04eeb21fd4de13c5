"""The gRPC stubs are generated from proto/medha.proto (by setup.py's build_py and on first import), never by hand."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_build_hook_generates_importable_package_stubs(tmp_path):
    spec = importlib.util.spec_from_file_location("_setup_codegen", ROOT / "proto" / "_codegen.py")
    codegen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(codegen)
    written = codegen.generate(tmp_path / "proto")
    assert sorted(p.name for p in written) == ["medha_pb2.py", "medha_pb2.pyi", "medha_pb2_grpc.py"]
    grpc_stub = (tmp_path / "proto" / "medha_pb2_grpc.py").read_text()
    assert "from proto import medha_pb2" in grpc_stub  # imports as part of the `proto` package
    assert "/medha.v1.Medha/Generate" in grpc_stub
    assert not codegen.stubs_stale()  # the checkout's stubs match medha.proto


def test_generated_stubs_are_not_tracked():
    out = subprocess.run(["git", "check-ignore", "proto/medha_pb2.py", "proto/medha_pb2_grpc.py", "proto/medha_pb2.pyi"],
                         cwd=ROOT, capture_output=True, text=True)
    assert out.stdout.split() == ["proto/medha_pb2.py", "proto/medha_pb2_grpc.py", "proto/medha_pb2.pyi"]


def test_setup_py_build_py_ships_the_stubs(tmp_path):
    """What `pip install .` runs: build_py copies the packages and generates the stubs into build_lib.

    Runs on a copy of the sources without stubs, so the checkout gets no build litter."""
    src, lib = tmp_path / "src", tmp_path / "lib"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*_pb2.py", "*_pb2_grpc.py", "*_pb2.pyi")
    for name in ("pyproject.toml", "setup.py"):
        shutil.copy2(ROOT / name, src / name)
    for pkg in ("proto", "server", "medha_jax", "pallas_kernels"):
        shutil.copytree(ROOT / pkg, src / pkg, ignore=skip)
    subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)], cwd=src, check=True,
                   capture_output=True)
    for name in ("__init__.py", "_codegen.py", "medha.proto", "medha_pb2.py", "medha_pb2_grpc.py"):
        assert (lib / "proto" / name).is_file(), name
    assert not (src / "proto" / "medha_pb2.py").exists()  # a normal build writes only to build_lib
    assert (lib / "server" / "app.py").is_file() and (lib / "medha_jax" / "serve.py").is_file()

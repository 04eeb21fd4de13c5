"""Generate the Python stubs for medha.proto with grpc_tools.protoc.

  proto/medha.proto --protoc (-I <root>)--> <out_root>/proto/medha_pb2.py, medha_pb2_grpc.py, medha_pb2.pyi

Used by setup.py (build_py, for normal and editable installs) and by proto/__init__.py when a
source checkout has no stubs yet or the .proto is newer than them. Including from the repository
root makes protoc write `from proto import medha_pb2` in the gRPC stub, so the stubs import as
part of the `proto` package. Files are generated in a temporary directory and moved into place
with os.replace, so concurrent first imports (pytest-xdist workers) never see a half-written file.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
PROTO_FILES = ("medha.proto",)
STUB_SUFFIXES = ("_pb2.py", "_pb2_grpc.py", "_pb2.pyi")


def stub_paths(out_dir: Path) -> list[Path]:
    return [out_dir / (Path(p).stem + s) for p in PROTO_FILES for s in STUB_SUFFIXES]


def stubs_stale(out_dir: Path = PROTO_DIR) -> bool:
    """True when a stub is missing or older than its .proto source."""
    newest_src = max((PROTO_DIR / p).stat().st_mtime for p in PROTO_FILES)
    return any(not s.exists() or s.stat().st_mtime < newest_src for s in stub_paths(out_dir))


def generate(out_dir: Path = PROTO_DIR) -> list[Path]:
    """Run protoc on PROTO_FILES and place the stubs in out_dir; returns their paths."""
    import grpc_tools
    from grpc_tools import protoc

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).resolve().parent / "_proto"
    with tempfile.TemporaryDirectory(prefix="medha-protoc-") as tmp:
        root = Path(tmp) / "src"
        (root / "proto").mkdir(parents=True)
        for p in PROTO_FILES:
            shutil.copy2(PROTO_DIR / p, root / "proto" / p)
        gen = Path(tmp) / "gen"
        gen.mkdir()
        args = ["grpc_tools.protoc", f"-I{root}", f"-I{well_known}", f"--python_out={gen}",
                f"--pyi_out={gen}", f"--grpc_python_out={gen}"]
        args += [f"proto/{p}" for p in PROTO_FILES]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {', '.join(PROTO_FILES)} (args: {' '.join(args[1:])})")
        written = []
        for stub in stub_paths(gen / "proto"):
            dest = out_dir / stub.name
            staged = out_dir / f".{stub.name}.{os.getpid()}.tmp"
            shutil.copyfile(stub, staged)
            os.replace(staged, dest)
            written.append(dest)
    return written


def ensure(out_dir: Path = PROTO_DIR) -> None:
    """Generate the stubs if missing or stale; stale but present stubs in a read-only install are kept."""
    if not stubs_stale(out_dir):
        return
    try:
        generate(out_dir)
    except OSError:
        if not all(s.exists() for s in stub_paths(out_dir)):
            raise

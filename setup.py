"""Build hook: generate the gRPC/protobuf stubs from proto/medha.proto during every build.

Project metadata lives in pyproject.toml; this file only swaps in a `build_py` that runs
grpc_tools.protoc (a build requirement) after the usual copy:
  normal install / wheel:   stubs written to <build_lib>/proto/  (shipped in the wheel)
  editable install (-e):    stubs written to the source proto/ (the editable finder maps the
                            package there; the files are gitignored)
The generation code is proto/_codegen.py, loaded by path so the build needs no import of the
package itself.
"""

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _codegen():
    spec = importlib.util.spec_from_file_location("_medha_proto_codegen", ROOT / "proto" / "_codegen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithProtos(build_py):
    def run(self):
        super().run()
        codegen = _codegen()
        if getattr(self, "editable_mode", False):
            codegen.generate(ROOT / "proto")
        else:
            codegen.generate(Path(self.build_lib) / "proto")


setup(cmdclass={"build_py": BuildPyWithProtos})

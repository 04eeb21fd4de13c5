"""The medha.v1 wire format: medha.proto and the stubs protoc generates from it.

Import the stubs as `from proto import medha_pb2, medha_pb2_grpc`. `pip install` (normal or
editable) generates them via setup.py; a source checkout used straight from PYTHONPATH gets them
generated here on first import (and regenerated when medha.proto is newer). Nothing else lives here.
"""

from proto import _codegen

_codegen.ensure()

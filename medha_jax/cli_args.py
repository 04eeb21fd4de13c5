"""Command-line flags generated from config dataclasses, so the CLI and `LLM(...)` never drift.

  dataclass fields (name, annotation, default) + attribute docstrings (read with `ast`)
      -> add_dataclass_args(parser, Cls)  : one `--field-name` flag per field, same default,
                                            the docstring as help; bools get --x / --no-x
      -> dataclass_from_args(Cls, ns)     : Cls(**values) (validated by Cls.__post_init__)

Supported annotations: str, int, float, bool, and `X | None` of those ("none" on the command
line gives None). Anything else is passed through as a string.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import textwrap
from functools import cache

_SCALARS = {"str": str, "int": int, "float": float, "bool": bool}


@cache
def field_docs(cls: type) -> dict[str, str]:
    """{field name: its attribute docstring (whitespace collapsed)} from the class source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def _parse_annotation(annotation) -> tuple[type | None, bool]:
    """(scalar type or None if unsupported, whether None is allowed) of a field annotation."""
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = [p.strip() for p in text.replace("Optional[", "").rstrip("]").split("|")]
    optional = "None" in parts
    parts = [p for p in parts if p != "None"]
    scalar = _SCALARS.get(parts[0]) if len(parts) == 1 else None
    return scalar, optional


def _optional(kind: type):
    def convert(text: str):
        return None if text.lower() == "none" else kind(text)

    convert.__name__ = kind.__name__  # argparse names the type in its error messages
    return convert


def flag_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, title: str | None = None) -> None:
    """Add one flag per field of dataclass `cls` (default and help from the class)."""
    doc = (cls.__doc__ or "").strip()
    described = doc and not doc.startswith(cls.__name__ + "(")  # not dataclass's generated signature
    group = parser.add_argument_group(title or cls.__name__, doc.splitlines()[0] if described else None)
    docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            raise TypeError(f"{cls.__name__}.{f.name} has no default; every config field needs one for the CLI")
        kind, optional = _parse_annotation(f.type)
        help_text = docs.get(f.name, "").replace("%", "%%") + " (default: %(default)s)"
        if kind is bool and not optional:
            group.add_argument(flag_name(f.name), dest=f.name, default=default, help=help_text,
                               action=argparse.BooleanOptionalAction)
            continue
        convert = kind or str
        group.add_argument(flag_name(f.name), *FLAG_ALIASES.get(f.name, ()), dest=f.name, default=default, help=help_text,
                           type=_optional(convert) if optional else convert, metavar=f.name.upper())


FLAG_ALIASES = {"policy": ("--scheduler",)}
"""Extra spellings of some flags (the issue tracker and the papers say "scheduler")."""


def dataclass_from_args(cls: type, ns: argparse.Namespace):
    """Build `cls` from the parsed flags of its fields (its __post_init__ validates them)."""
    return cls(**{f.name: getattr(ns, f.name) for f in dataclasses.fields(cls)})

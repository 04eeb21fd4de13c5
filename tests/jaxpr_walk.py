"""Walking a jaxpr and every jaxpr nested in it (scan bodies, pjit callees, conds' branches), for
tests that pin which primitives a compiled program holds."""

from __future__ import annotations

import collections


def sub_jaxprs(eqn):
    """The jaxprs nested in an equation's parameters (a scan's body, a pjit's callee, ...)."""
    for value in eqn.params.values():
        for sub in value if isinstance(value, (tuple, list)) else (value,):
            sub = getattr(sub, "jaxpr", sub)  # a ClosedJaxpr holds its Jaxpr
            if hasattr(sub, "eqns"):
                yield sub


def primitives(jaxpr) -> collections.Counter:
    """Primitive names in a jaxpr and every jaxpr nested in its equations' parameters."""
    names = collections.Counter()
    for eqn in jaxpr.eqns:
        names[eqn.primitive.name] += 1
        for sub in sub_jaxprs(eqn):
            names.update(primitives(sub))
    return names

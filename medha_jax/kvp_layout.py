"""Where a request's KV positions live over the kvp groups, and which group runs its tokens.

  a request placed on group h (its first group, chosen once when it first gets pages):
      block b = positions [b*M, (b+1)*M) lives on group (h + b) % kvp     M = max_tokens_per_kvp_group
      (progressive onboarding: group h until it holds M tokens, then h+1, ...; at most kvp blocks)
  its owner in an iteration = the group of the block holding its last position after it: the
      group whose batch carries its query tokens (projections, MLP, sampling); every group holding
      some of its keys also computes their share of its attention (Mnemosyne 4.4)

With h = 0 for every request this is the layout where group g holds [g*M, (g+1)*M) of everyone.
Pure Python.
"""

from __future__ import annotations


def group_of_block(first_group: int, block: int, kvp: int) -> int:
    return (first_group + block) % kvp


def owner(q: int, kv: int, first_group: int, M: int, kvp: int) -> int:
    """The group holding position kv + q - 1 (the last one this iteration computes)."""
    return (first_group + (kv + q - 1) // M) % kvp


def shards(end: int, first_group: int, M: int, kvp: int):
    """(group, a, b): the sequence's positions [a, b) of [0, end) that each group holds."""
    b = 0
    while b * M < end:
        yield (first_group + b) % kvp, b * M, min(end, (b + 1) * M)
        b += 1

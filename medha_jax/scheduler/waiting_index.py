"""The waiting queue, indexed so that a batch never re-sorts every waiting request.

  policy.on_waiting(req) --add--> pending --flush (at the next candidates() call)-->
      singles: {group: entry}            groups holding one request (e.g. each long prompt
                                          under lars, whose deadline D is its own)
      groups:  {group: [entry, ...]}     sorted by static key (e.g. all short prompts with D = D_min)
  policy.candidates(now) --iter_groups()--> best-first iterators of (priority now, request):
      one per multi-request group (lazy) + one over all singles (keys computed in one pass)
      --heapq.merge--> the packer consumes only what it needs

An entry is (static_key, seq, request, group). A policy maps each waiting request to (group,
static_key) such that inside one group the order by static_key is the order by the time-varying
priority at every `now` (fcfs/edf/lrs: one group; lars: one group per deadline D, since
(anchor - now) / D keeps its order among equal D). Removals are lazy inside multi-request groups:
a request that leaves the queue loses its live entry, and its stale tuple is dropped when met at
a group's head, or by a rebuild once stale tuples outnumber live ones. Additions made while
candidates are being consumed wait in `pending`, so no list changes under an iterator.
Pure Python.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Hashable, Iterator

from medha_jax.request import Request


class WaitingIndex:
    def __init__(self, group_and_key: Callable[[Request], tuple[Hashable, float]]):
        self._group_and_key = group_and_key
        self._singles: dict[Hashable, tuple] = {}
        self._groups: dict[Hashable, list[tuple]] = {}
        self._live: dict[Request, tuple] = {}
        self._pending: dict[Request, None] = {}
        self._seq = itertools.count()
        self._stale = 0

    def __len__(self) -> int:
        return len(self._live) + len(self._pending)

    def add(self, req: Request) -> None:
        self._pending[req] = None

    def discard(self, req: Request) -> None:
        self._pending.pop(req, None)
        self._drop_live(req)

    def _drop_live(self, req: Request) -> None:
        entry = self._live.pop(req, None)
        if entry is None:
            return
        group = entry[3]
        if self._singles.get(group) is entry:
            del self._singles[group]
        else:
            self._stale += 1

    def flush(self) -> None:
        pending = list(self._pending)
        self._pending.clear()
        for req in pending:
            self._drop_live(req)
            group, key = self._group_and_key(req)
            entry = (key, next(self._seq), req, group)
            self._live[req] = entry
            lst = self._groups.get(group)
            if lst is not None:
                bisect.insort(lst, entry)
            elif group in self._singles:
                self._groups[group] = sorted([self._singles.pop(group), entry])
            else:
                self._singles[group] = entry
        if self._stale > 64 and self._stale > len(self._live):
            self._rebuild()

    def _rebuild(self) -> None:
        by_group: dict[Hashable, list] = {}
        for entry in self._live.values():
            by_group.setdefault(entry[3], []).append(entry)
        self._singles = {g: lst[0] for g, lst in by_group.items() if len(lst) == 1}
        self._groups = {g: sorted(lst) for g, lst in by_group.items() if len(lst) > 1}
        self._stale = 0

    def iter_groups(self, key_now: Callable[[Hashable, float], float],
                    bulk_key_now: Callable[[list, list], list[float]]) -> list[Iterator[tuple[float, Request]]]:
        """Best-first iterators of (priority now, request) (call `flush` first). `key_now(group,
        static_key)` turns a static key into the priority now; `bulk_key_now(groups, static_keys)`
        does the same for lists (one call for all single-request groups)."""
        out = []
        live = self._live
        for group, lst in list(self._groups.items()):
            i = 0  # drop stale entries at the head for good
            while i < len(lst) and live.get(lst[i][2]) is not lst[i]:
                i += 1
            if i:
                del lst[:i]
                self._stale = max(0, self._stale - i)
            if lst:
                out.append(self._iter(lst, group, key_now))
            else:
                del self._groups[group]
        if self._singles:
            entries = list(self._singles.values())
            keys = bulk_key_now([e[3] for e in entries], [e[0] for e in entries])
            ranked = sorted(zip(keys, [e[1] for e in entries], [e[2] for e in entries]))
            out.append((k, r) for k, _, r in ranked)
        return out

    def _iter(self, lst: list, group: Hashable, key_now) -> Iterator[tuple[float, Request]]:
        live = self._live
        for entry in lst:
            req = entry[2]
            if live.get(req) is entry:
                yield key_now(group, entry[0]), req

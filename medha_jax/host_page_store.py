"""Host-memory tier of the prefix cache: KV pages evicted from the device are copied here, and a
request whose prefix is only here gets it copied back instead of recomputed (swap, not recompute).

  PrefixCache eviction of a cached device page --save(h, group, parent, tokens, page)-->
        entries[h] = (slot, group, parent, tokens); op ("out", group, page, slot)
  PrefixCache.match, a page found here, not on the device --restore(h, group, new device page)-->
        op ("in", group, page, slot)
  Engine, after each `schedule` and before the step runs --take_ops()--> the ops in issue order
        -> `executor.host_swap.HostSwap.apply` (device <-> host copies, in that order)

A preempted request frees its pages to the prefix cache (its full, computed pages stay indexed
there); when the allocation that preempted it reuses them, they are evicted here, and when it
resumes its prefix match restores them, so it recomputes at most its last, partial page. The same
holds for any evicted page (a multi-turn conversation's document after other traffic filled the
device). Slots are recycled least recently used first; a page already here is not copied twice.
Ops run in the order issued, so an op list may reuse a slot or a device page within itself (a
restore that reads slot s before a save that overwrites s; a save of page p before a restore
into p). Hits are verified like the device cache's (tokens, parent link, kvp group), so a hash
collision costs a miss, never wrong KV. Pure Python, no JAX.
"""

from __future__ import annotations

from typing import NamedTuple


class SwapOp(NamedTuple):
    kind: str  # "out": device page -> host slot; "in": host slot -> device page
    group: int  # kvp group of the device page
    page: int  # the page's id in its group's pool
    slot: int  # host slot


class HostPageStore:
    def __init__(self, num_slots: int):
        if not isinstance(num_slots, int) or isinstance(num_slots, bool) or num_slots < 1:
            raise ValueError(f"num_slots must be an integer >= 1, got {num_slots!r}")
        self.num_slots = num_slots
        self._entries: dict[int, tuple[int, int, int, tuple[int, ...]]] = {}  # hash -> (slot, group, parent,
        #   tokens), least recently used first
        self._used_slots = 0  # slots [0, _used_slots) have held a page; the rest were never used
        self._ops: list[SwapOp] = []
        self.saved_pages = 0
        """Pages copied device -> host."""
        self.restored_pages = 0
        """Pages copied host -> device (KV that was not recomputed)."""
        self.dropped_pages = 0
        """Pages pushed out of host memory by newer ones (those prefixes recompute if needed again)."""

    def __len__(self) -> int:
        return len(self._entries)

    def save(self, h: int, group: int, parent: int, tokens: tuple[int, ...], page: int) -> None:
        """Device page `page` of kvp group `group` (prefix-cache entry h) is about to be reused:
        keep a copy of its KV (nothing to copy when h is here already)."""
        if h in self._entries:
            self.touch(h)
            return
        if self._used_slots < self.num_slots:
            slot = self._used_slots
            self._used_slots += 1
        else:
            old = next(iter(self._entries))
            slot = self._entries.pop(old)[0]
            self.dropped_pages += 1
        self._entries[h] = (slot, group, parent, tokens)
        self._ops.append(SwapOp("out", group, page, slot))
        self.saved_pages += 1

    def has(self, h: int, group: int, parent: int, tokens: tuple[int, ...]) -> bool:
        e = self._entries.get(h)
        return e is not None and e[1] == group and e[2] == parent and e[3] == tokens

    def touch(self, h: int) -> None:
        """Mark entry h most recently used (the last one `save` would push out)."""
        self._entries[h] = self._entries.pop(h)

    def restore(self, h: int, page: int) -> None:
        """Copy entry h (checked with `has`) back into device page `page` of its group."""
        self.touch(h)
        slot, group = self._entries[h][:2]
        self._ops.append(SwapOp("in", group, page, slot))
        self.restored_pages += 1

    def take_ops(self) -> list[SwapOp]:
        """The copies issued since the last call, in order (the caller must run them all before
        the next model step)."""
        ops, self._ops = self._ops, []
        return ops

    def clear(self) -> None:
        """Forget every page (the device cache was reset: copies not yet made would read lost KV)."""
        self._entries.clear()
        self._used_slots = 0
        self._ops.clear()


__all__ = ["HostPageStore", "SwapOp"]

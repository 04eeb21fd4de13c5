"""KV-cache pages of ONE kvp group: a free list plus reference counts.

  KVCacheManager --allocate(n)--> PageAllocator --> n page ids (refcount 1 each)
                 --incref(p)-->                     refcount + 1 (a second owner, e.g. a shared prefix)
                 --free(pages) / decref(p)-->       refcount - 1; at 0 the page returns to the free list

`allocate` never hands out a page whose refcount is above zero, so no page is ever owned twice
by accident, and releasing a page that is already free raises `PageAllocatorError` (a double free
is always a bug upstream).

Prefix caching: a page marked `cached` (its KV is registered in the prefix cache) that drops to
refcount 0 is not wiped but parked on an LRU list of evictable pages; it still counts as free.
`acquire(page)` takes a parked page back (refcount 1) or adds an owner to a held one; `allocate`
hands out never-cached free pages first and evicts the least recently parked ones only when it
must, telling the cache through `on_evict(page)` so no stale entry can point at the page. Not enough free pages is not a bug but a normal state under memory
pressure: `allocate` raises `OutOfPagesError` and allocates nothing; callers that want to ask
first use `can_allocate(n)`. Pages come out lowest id first from a fresh allocator and freed
pages are reused first (LIFO), so tests can assert exact page ids. Pure Python, no JAX.
"""

from __future__ import annotations

from collections.abc import Iterable


class PageAllocatorError(RuntimeError):
    """A page was released more often than it was held, or an id is out of range."""


class OutOfPagesError(RuntimeError):
    """Fewer free pages than requested; nothing was allocated."""


class PageAllocator:
    """Pages `0 .. num_pages-1` of one kvp group."""

    __slots__ = ("_num_pages", "_free", "_refcount", "_cached", "_parked", "on_evict")

    def __init__(self, num_pages: int):
        if not isinstance(num_pages, int) or isinstance(num_pages, bool) or num_pages < 1:
            raise ValueError(f"num_pages must be an integer >= 1, got {num_pages!r}")
        self._num_pages = num_pages
        # A stack: pop() from the end. Reversed so a fresh allocator hands out 0, 1, 2, ...
        self._free: list[int] = list(range(num_pages - 1, -1, -1))
        self._refcount: list[int] = [0] * num_pages
        self._cached: set[int] = set()  # pages whose contents the prefix cache points at
        self._parked: dict[int, None] = {}  # cached pages with refcount 0, least recently parked first
        self.on_evict = None  # callable(page): a parked page is about to be reused for other KV

    @property
    def num_total(self) -> int:
        return self._num_pages

    @property
    def num_free(self) -> int:
        """Pages not held by anyone (parked cached pages included: they are reusable)."""
        return len(self._free) + len(self._parked)

    @property
    def num_used(self) -> int:
        return self._num_pages - self.num_free

    @property
    def num_parked(self) -> int:
        return len(self._parked)

    def can_allocate(self, n: int) -> bool:
        return 0 <= n <= self.num_free

    def allocate(self, n: int) -> list[int]:
        """`n` distinct free pages, each with refcount 1 (never-cached ones first, then the least
        recently parked cached ones, evicted). Raises `OutOfPagesError` (allocating nothing)
        when fewer than `n` are free."""
        if n < 0:
            raise ValueError(f"cannot allocate a negative number of pages ({n})")
        if n > self.num_free:
            raise OutOfPagesError(f"asked for {n} pages, {self.num_free} of {self._num_pages} free")
        if n == 0:
            return []
        k = min(n, len(self._free))
        pages = self._free[len(self._free) - k:]
        del self._free[len(self._free) - k:]
        pages.reverse()
        for _ in range(n - k):
            pages.append(self._evict_parked())
        rc = self._refcount
        for p in pages:
            rc[p] = 1
        return pages

    def allocate_one(self) -> int:
        """`allocate(1)[0]`, for the scheduler's decode pass (a decode crossing a page boundary)."""
        if self._free:
            p = self._free.pop()
        elif self._parked:
            p = self._evict_parked()
        else:
            raise OutOfPagesError(f"asked for 1 page, 0 of {self._num_pages} free")
        self._refcount[p] = 1
        return p

    def _evict_parked(self) -> int:
        """The least recently parked cached page, taken out of the cache (`on_evict` told first)."""
        p = next(iter(self._parked))
        del self._parked[p]
        self._cached.discard(p)
        if self.on_evict is not None:
            self.on_evict(p)
        return p

    def mark_cached(self, page: int) -> None:
        """The prefix cache now points at this held page: park it instead of freeing it at refcount 0."""
        self._check(page)
        if self._refcount[page] == 0:
            raise PageAllocatorError(f"mark_cached on free page {page}")
        self._cached.add(page)

    def acquire(self, page: int) -> None:
        """Take a cached page for a new owner: a parked one comes back with refcount 1, a held
        one gets one more owner."""
        self._check(page)
        if self._refcount[page] == 0:
            if page not in self._parked:
                raise PageAllocatorError(f"acquire on page {page}, which is neither held nor parked")
            del self._parked[page]
        self._refcount[page] += 1

    def drop_cached(self) -> list[int]:
        """Forget every cached page (their KV is no longer trusted): parked ones become plain free
        pages. Returns the pages that were cached."""
        pages = list(self._cached)
        self._free.extend(self._parked)
        self._parked.clear()
        self._cached.clear()
        return pages

    def refcount(self, page: int) -> int:
        self._check(page)
        return self._refcount[page]

    def incref(self, page: int) -> None:
        """Add an owner to a page that is already allocated."""
        self._check(page)
        if self._refcount[page] == 0:
            raise PageAllocatorError(f"incref on free page {page}; allocate it first")
        self._refcount[page] += 1

    def decref(self, page: int) -> None:
        """Drop one owner; the page returns to the free list when none are left."""
        self._check(page)
        rc = self._refcount[page]
        if rc == 0:
            raise PageAllocatorError(f"page {page} released while free (double free)")
        self._refcount[page] = rc - 1
        if rc == 1:
            if page in self._cached:
                self._parked[page] = None
            else:
                self._free.append(page)

    def free(self, pages: Iterable[int]) -> None:
        """`decref` every page; the pages are checked first, so a bad list changes nothing."""
        pages = list(pages)
        held: dict[int, int] = {}
        for p in pages:
            self._check(p)
            held[p] = held.get(p, 0) + 1
            if held[p] > self._refcount[p]:
                raise PageAllocatorError(
                    f"page {p} released {held[p]} times but held {self._refcount[p]} times (double free)"
                )
        # Release in reverse so that a later allocate() hands the same pages back in order.
        for p in reversed(pages):
            self.decref(p)

    def _check(self, page: int) -> None:
        if not 0 <= page < self._num_pages:
            raise PageAllocatorError(f"page id {page} out of range [0, {self._num_pages})")

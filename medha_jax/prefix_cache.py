"""Prefix cache: full KV pages found by their content, so a repeated prefix is not prefilled again.

  KVCacheManager.commit(request) --register(rid, tokens, full pages)--> entries[h_i] = (group, page, h_{i-1}, tokens)
      h_i = hash((h_{i-1}, the page's tokens)): page i's key covers every token before it too
  KVCacheManager.match_prefix(request) --match(rid, tokens, max_pages)--> [(group, page), ...] the
      longest run of cached pages from position 0 whose tokens (and parent links) are equal, each
      taken for the request: a device page acquired, or (with a host tier) a page found only in
      host memory copied into a newly allocated device page (`HostPageStore.restore`)
  KVCacheManager.peek_prefix(request) --peek(tokens, max_pages)--> how many pages match would give
      now (nothing taken, nothing recorded: the scheduler's work estimates)
  Scheduler, once a request is admitted --record(queried, hit)--> the hit-rate counters
  PageAllocator eviction --_evict(group, page)--> the entry pointing at the page is dropped (and,
      with a host tier, its KV copied to host memory first: `HostPageStore.save`)

A hit is verified, not trusted: the entry's tokens must equal the request's page and its parent
link the hash verified one page earlier, so a hash collision can only cost a miss, never serve
another prompt's KV. Page i of a request placed on group h lives on kvp group
(h + i * page_size // M) % kvp (`kvp_layout`); an entry is only used at the same position on the
same group, so a request reusing a cached prefix is placed where the prefix's first page is
(`first_group_of`; always group 0 unless the KV manager spreads requests over the groups). The chain of each request's
registered or matched pages is kept so registering new full pages is O(new pages). Pure Python.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

from medha_jax.host_page_store import HostPageStore
from medha_jax.kvp_layout import group_of_block

_ROOT = 0  # the parent hash of page 0


class PrefixCache:
    def __init__(self, page_size: int, pages_per_group: int, allocators: Sequence,
                 host: HostPageStore | None = None, any_first_group: bool = False):
        self.page_size = page_size
        self.any_first_group = any_first_group
        self.host = host
        self.pages_per_group = pages_per_group
        self.allocators = allocators
        self._entries: dict[int, tuple[int, int, int, tuple[int, ...]]] = {}
        self._key: list[dict[int, int]] = [{} for _ in allocators]  # per group: page -> its entry's hash
        self._chains: dict[str, list[int]] = {}  # request id -> hashes of its first pages
        for g, a in enumerate(allocators):
            a.on_evict = functools.partial(self._evict, g)
        self.queried_tokens = 0
        self.hit_tokens = 0
        self.evicted_pages = 0
        """Cached pages whose KV was overwritten by an allocation (LRU eviction)."""

    def __len__(self) -> int:
        return len(self._entries)

    def first_group_of(self, tokens: Sequence[int]) -> int | None:
        """The group a request starting with `tokens` must be placed on to reuse their cached pages:
        where their first page is cached (None: it is not), or 0 when every request starts on 0."""
        if not self.any_first_group:
            return 0
        page_tokens = tuple(tokens[:self.page_size])
        if len(page_tokens) < self.page_size:
            return None
        h = hash((_ROOT, page_tokens))
        e = self._entries.get(h)
        if e is not None and e[3] == page_tokens and e[2] == _ROOT:
            return e[0]
        if self.host is not None:
            for g in range(len(self.allocators)):
                if self.host.has(h, g, _ROOT, page_tokens):
                    return g
        return None

    def match(self, request_id: str, tokens: Sequence[int], max_pages: int, first_group: int = 0) -> list[tuple[int, int]]:
        """(group, page) of the longest cached prefix of `tokens`, at most max_pages pages, each
        taken for the request (one more owner). A page only the host tier holds is restored into
        a newly allocated device page (which may evict parked pages, never one taken here); the
        match stops where a group has no page left for that."""
        out, chain, host = [], [], self.host
        for g, h, parent, page_tokens in self._pages(tokens, max_pages, first_group):
            page = self._on_device(g, h, parent, page_tokens)
            if page is not None:
                self.allocators[g].acquire(page)
            elif host is not None and host.has(h, g, parent, page_tokens):
                page = self._restore(h, g, parent, page_tokens)
                if page is None:
                    break
            else:
                break
            out.append((g, page))
            chain.append(h)
        self._chains[request_id] = chain
        return out

    def _pages(self, tokens: Sequence[int], max_pages: int, first_group: int):
        """(group, key, parent key, the page's tokens) of pages 0 .. max_pages-1 of `tokens` for a
        request placed on `first_group`."""
        ps, parent, per, kvp = self.page_size, _ROOT, self.pages_per_group, len(self.allocators)
        for i in range(max_pages):
            page_tokens = tuple(tokens[i * ps:(i + 1) * ps])
            h = hash((parent, page_tokens))
            yield group_of_block(first_group, i // per, kvp), h, parent, page_tokens
            parent = h

    def _on_device(self, g: int, h: int, parent: int, page_tokens: tuple[int, ...]) -> int | None:
        """The device page cached under key h, if its entry really is this page (same tokens,
        parent and group: a hash collision is a miss)."""
        e = self._entries.get(h)
        return e[1] if e is not None and e[3] == page_tokens and e[2] == parent and e[0] == g else None

    def _restore(self, h: int, g: int, parent: int, page_tokens: tuple[int, ...]) -> int | None:
        """A device page (refcount 1, indexed under h) that host entry h is copied into; None when
        group g has no page to give."""
        alloc, host = self.allocators[g], self.host
        if alloc.num_free < 1:
            return None
        host.touch(h)  # the allocation below may save evicted pages to host: not over this one
        page = alloc.allocate(1)[0]
        if not host.has(h, g, parent, page_tokens):  # a one-slot host tier gave its slot away
            alloc.free([page])
            return None
        host.restore(h, page)
        self._entries[h] = (g, page, parent, page_tokens)
        self._key[g][page] = h
        alloc.mark_cached(page)
        return page

    def peek(self, tokens: Sequence[int], max_pages: int, first_group: int = 0) -> int:
        """How many pages `match` would find now (host-tier ones included); changes nothing."""
        host = self.host
        for i, (g, h, parent, page_tokens) in enumerate(self._pages(tokens, max_pages, first_group)):
            if (self._on_device(g, h, parent, page_tokens) is None
                    and not (host is not None and host.has(h, g, parent, page_tokens))):
                return i
        return max_pages

    def record(self, queried_tokens: int, hit_tokens: int) -> None:
        """An admitted request looked up `queried_tokens` tokens and got `hit_tokens` from the cache
        (counted once per admission, however often the scheduler offered it a prefix before)."""
        self.queried_tokens += queried_tokens
        self.hit_tokens += hit_tokens

    def register(self, request_id: str, new_tokens: Sequence[int], num_full_pages: int,
                 page_of: Callable[[int], tuple[int, int]]) -> None:
        """Pages [0, num_full_pages) of the request hold its KV: index the ones not indexed yet.
        `new_tokens` are the tokens of those pages only, from page `num_registered(request_id)` on
        (a long prompt is not re-sliced from position 0 at every chunk)."""
        chain = self._chains.setdefault(request_id, [])
        ps = self.page_size
        first = len(chain)
        for i in range(first, num_full_pages):
            parent = chain[-1] if chain else _ROOT
            page_tokens = tuple(new_tokens[(i - first) * ps:(i - first + 1) * ps])
            h = hash((parent, page_tokens))
            chain.append(h)
            if h in self._entries:
                continue  # the same content is cached in another page already
            g, page = page_of(i)
            self._entries[h] = (g, page, parent, page_tokens)
            self._key[g][page] = h
            self.allocators[g].mark_cached(page)

    def num_registered(self, request_id: str) -> int:
        return len(self._chains.get(request_id, ()))

    def forget(self, request_id: str) -> None:
        self._chains.pop(request_id, None)

    def clear(self) -> None:
        """Forget everything (the device cache was reset): no entry may be served again."""
        self._entries.clear()
        for keys in self._key:
            keys.clear()
        self._chains.clear()
        for a in self.allocators:
            a.drop_cached()
        if self.host is not None:
            self.host.clear()

    def _evict(self, group: int, page: int) -> None:
        h = self._key[group].pop(page, None)
        if h is not None:
            e = self._entries.pop(h, None)
            self.evicted_pages += 1
            if self.host is not None and e is not None:
                self.host.save(h, group, e[2], e[3], page)

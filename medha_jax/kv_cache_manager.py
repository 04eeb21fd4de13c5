"""Per-request KV page tables over the kvp groups (progressive onboarding).

  Scheduler --can_allocate / allocate(request, n)--> KVCacheManager --per group--> PageAllocator
            <--page_tables(request)--  one page table (int32 array) per kvp group the request touches
            --free(request)-->         every page back to its group's allocator

Each kvp group has its own page pool of `num_pages_per_group` pages of `page_size` tokens. A
request's KV positions fill its first group h first, then the next (`kvp_layout`): block b =
positions [b*M, (b+1)*M) lives on group (h + b) % kvp, M = `max_tokens_per_kvp_group` (a multiple
of `page_size`, at most one group's capacity). h is chosen when the request first gets pages: with
`per_group_batches` (each group runs its own batch, Mnemosyne's design) the group with the most
free pages, or the group holding its cached prefix; otherwise group 0 for everyone, so group g
holds [g*M, (g+1)*M) of every request. With kvp == 1 and no M given, everything lives on group 0. `allocate(request, n)` makes sure pages
exist for positions [0, request.num_computed_tokens + n); allocation is all-or-nothing: it
checks every group first and raises `OutOfPagesError` without allocating anything when a group
is short. Page tables returned are the manager's live lists (they only grow while the request
holds its pages, and are dropped, not cleared, on free): read them, never mutate them.

With prefix caching (`prefix_caching=True`, `prefix_cache.PrefixCache`): `match_prefix(request)`
gives a request that holds no pages the longest run of cached full pages equal to its first
tokens (shared, refcounted, at least one token left to compute) and returns how many tokens they
cover; `peek_prefix(request)` says how many that would be now without taking anything;
`commit(request)` indexes the request's pages that are full and computed; freed cached pages are
parked, still reusable by content, until an allocation needs them. With a host tier
(`host_slots` > 0, `host_page_store.HostPageStore`) an evicted page's KV is copied to host memory
and a later match copies it back: `take_swap_ops()` hands the engine those copies, which must run
before the next model step. A preempted request so resumes from its last full page.
Pure Python, no JAX.
"""

from __future__ import annotations

from array import array

from medha_jax.host_page_store import HostPageStore, SwapOp
from medha_jax.kvp_layout import group_of_block
from medha_jax.page_allocator import OutOfPagesError, PageAllocator
from medha_jax.prefix_cache import PrefixCache
from medha_jax.request import Request


class KVCacheManager:
    def __init__(
        self,
        num_pages_per_group: int,
        page_size: int,
        kvp: int = 1,
        max_tokens_per_kvp_group: int | None = None,
        prefix_caching: bool = False,
        host_slots: int = 0,
        per_group_batches: bool = False,
    ):
        for name, v in (("num_pages_per_group", num_pages_per_group), ("page_size", page_size), ("kvp", kvp)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        capacity = num_pages_per_group * page_size
        if max_tokens_per_kvp_group is None:
            max_tokens_per_kvp_group = capacity
        if (
            not isinstance(max_tokens_per_kvp_group, int)
            or max_tokens_per_kvp_group < page_size
            or max_tokens_per_kvp_group % page_size
            or max_tokens_per_kvp_group > capacity
        ):
            raise ValueError(
                f"max_tokens_per_kvp_group must be a multiple of page_size={page_size} between "
                f"{page_size} and one group's capacity {capacity} (num_pages_per_group * page_size), "
                f"got {max_tokens_per_kvp_group!r}"
            )
        self.page_size = page_size
        self.kvp = kvp
        self.num_pages_per_group = num_pages_per_group
        self.max_tokens_per_kvp_group = max_tokens_per_kvp_group
        self.allocators = [PageAllocator(num_pages_per_group) for _ in range(kvp)]
        self.per_group_batches = per_group_batches and kvp > 1
        """Requests are spread over the groups (each group runs its own batch); else all start on group 0."""
        self.tables: dict[str, list[array]] = {}
        """request_id -> page tables, one per block, each an int32 `array` of page ids (read-only outside
        this class; `page_tables` is the API)."""
        self.first_groups: dict[str, int] = {}
        """request_id -> the group holding its block 0 (requests holding pages; read-only)."""
        self.covered: dict[str, int] = {}
        """request_id -> positions its pages can hold (read-only; lets hot loops skip a call)."""
        if host_slots and not prefix_caching:
            raise ValueError("a host KV tier (swap space) needs prefix caching: it keeps the pages the prefix "
                             "cache evicts; enable prefix caching or set the swap space to 0")
        self.host: HostPageStore | None = HostPageStore(host_slots) if host_slots else None
        """Host-memory tier of the prefix cache (swap space), or None."""
        self.prefix: PrefixCache | None = (
            PrefixCache(page_size, max_tokens_per_kvp_group // page_size, self.allocators, self.host,
                        any_first_group=self.per_group_batches)
            if prefix_caching else None)

    # ---- capacity --------------------------------------------------------------------------
    @property
    def max_tokens_per_request(self) -> int:
        """Most KV positions one request can ever hold (all groups, each filled to M)."""
        return self.kvp * self.max_tokens_per_kvp_group

    @property
    def num_total_pages(self) -> int:
        return self.kvp * self.num_pages_per_group

    @property
    def num_free_pages(self) -> int:
        return sum(a.num_free for a in self.allocators)

    @property
    def num_free_pages_per_group(self) -> list[int]:
        return [a.num_free for a in self.allocators]

    @property
    def usage(self) -> float:
        """Fraction of all pages in use."""
        return 1.0 - self.num_free_pages / self.num_total_pages

    def first_group(self, request: Request, group: int | None = None) -> int:
        """The group holding its block 0; for a request without pages, the one that would: `group`
        if given (the scheduler's placement), else the group with the most free pages."""
        h = self.first_groups.get(request.request_id)
        if h is not None:
            return h
        if not self.per_group_batches:
            return 0
        if group is not None:
            return group
        allocs = self.allocators
        return max(range(self.kvp), key=lambda g: (allocs[g].num_free, -g))  # most free pages, then lowest

    def groups_of(self, request: Request, num_tokens: int) -> list[int]:
        """The groups holding positions [0, num_tokens) of the request, block by block."""
        h, m = self.first_group(request), self.max_tokens_per_kvp_group
        return [group_of_block(h, b, self.kvp) for b in range(max(1, -(-num_tokens // m)))]

    def pages_for(self, num_tokens: int) -> list[int]:
        """Pages needed in each block (blocks 0..last touched) to hold positions [0, num_tokens)."""
        m, ps = self.max_tokens_per_kvp_group, self.page_size
        out = []
        g = 0
        while g * m < num_tokens:
            n = min(num_tokens - g * m, m)
            out.append(-(-n // ps))
            g += 1
        return out

    def can_ever_fit(self, num_tokens: int) -> bool:
        return num_tokens <= self.max_tokens_per_request

    # ---- per request -----------------------------------------------------------------------
    def _shortfall(self, request: Request, num_new_tokens: int) -> list[int] | None:
        """Pages to add per block; None if the positions could never fit."""
        target = request.num_computed_tokens + num_new_tokens
        if target > self.max_tokens_per_request:
            return None
        need = self.pages_for(target)
        have = self.tables.get(request.request_id, ())
        return [n - (len(have[g]) if g < len(have) else 0) for g, n in enumerate(need)]

    def can_allocate(self, request: Request, num_new_tokens: int, group: int | None = None) -> bool:
        """Whether `allocate(request, num_new_tokens, group)` would succeed now."""
        if request.num_computed_tokens + num_new_tokens <= self.covered.get(request.request_id, 0):
            return True
        short = self._shortfall(request, num_new_tokens)
        if short is None:
            return False
        allocs, h, kvp = self.allocators, self.first_group(request, group), self.kvp
        return all(n <= allocs[group_of_block(h, b, kvp)].num_free for b, n in enumerate(short))

    def num_missing_pages(self, request: Request, num_new_tokens: int) -> int:
        """Pages still to allocate for `num_new_tokens` more tokens (over all groups)."""
        short = self._shortfall(request, num_new_tokens)
        if short is None:
            raise ValueError(
                f"request {request.request_id} would hold {request.num_computed_tokens + num_new_tokens} "
                f"tokens, more than the {self.max_tokens_per_request} one request can ever hold"
            )
        return sum(max(n, 0) for n in short)

    def try_allocate(self, request: Request, num_new_tokens: int, group: int | None = None) -> bool:
        """`allocate` if it can succeed now; False (nothing allocated) otherwise. The fast path
        (the pages already cover the positions) is one dict lookup: decodes take it 15 of 16 times."""
        rid = request.request_id
        target = request.num_computed_tokens + num_new_tokens
        covered = self.covered.get(rid, 0)
        if target <= covered:
            return True
        # Every new page in one block (a decode crossing a page boundary, a chunk that stays in
        # the block its request already reached, a first chunk inside block 0): no per-block
        # shortfall to work out.
        tables = self.tables.get(rid)
        m = self.max_tokens_per_kvp_group
        end = len(tables) * m if tables else m
        if covered < end and target <= end and num_new_tokens >= 0:
            b = len(tables) - 1 if tables else 0
            h = self.first_group(request, group)
            alloc = self.allocators[group_of_block(h, b, self.kvp)]
            n = -(-(target - covered) // self.page_size)
            if n > alloc.num_free:
                return False
            if not tables:
                tables = self.tables[rid] = [array("i")]
                self.first_groups[rid] = h
            if n == 1:
                tables[b].append(alloc.allocate_one())
            else:
                tables[b].extend(alloc.allocate(n))
            self.covered[rid] = covered + n * self.page_size
            return True
        if not self.can_allocate(request, num_new_tokens, group):
            return False
        self.allocate(request, num_new_tokens, group)
        return True

    def try_add_page(self, request: Request) -> bool:
        """One more page at the end of a request's last block: `try_allocate(request, 1)` for a
        decode whose next position starts a page (the scheduler's general decode loop; its fast
        path grants them all at once, `try_add_pages`), without the general path's per-block arithmetic. False, with
        nothing allocated, when the last block is full or its group has no free page: the caller
        then takes the general path (`Scheduler.reserve`). The request must hold pages."""
        rid = request.request_id
        tables = self.tables[rid]
        covered = self.covered[rid]
        if covered >= len(tables) * self.max_tokens_per_kvp_group:
            return False  # the next position starts a new block
        alloc = self.allocators[group_of_block(self.first_groups[rid], len(tables) - 1, self.kvp)]
        if not alloc.num_free:
            return False
        tables[-1].append(alloc.allocate_one())
        self.covered[rid] = covered + self.page_size
        return True

    def try_add_pages(self, requests: list[Request], positions: list[int]) -> int:
        """For each request in order, a page for its KV at `positions[i]` if its pages end there
        (`try_add_page`; nothing if they cover it already): the scheduler's decode pass, every
        decode whose next position may start a page at once. Stops at the first that needs more
        (its pages end before the position) or gets none; returns how many were seen to."""
        if self.kvp > 1:
            for k, (req, pos) in enumerate(zip(requests, positions)):
                c = self.covered[req.request_id]
                if pos > c or (pos == c and not self.try_add_page(req)):
                    return k
            return len(requests)
        alloc, tables, covered = self.allocators[0], self.tables, self.covered
        ps, m = self.page_size, self.max_tokens_per_kvp_group
        free = alloc.num_free
        for k, (req, pos) in enumerate(zip(requests, positions)):
            rid = req.request_id
            c = covered[rid]
            if pos < c:
                continue
            t = tables[rid]
            if pos > c or not free or c >= len(t) * m:
                return k
            t[-1].append(alloc.allocate_one())
            covered[rid] = c + ps
            free -= 1
        return len(requests)

    def allocate(self, request: Request, num_new_tokens: int, group: int | None = None) -> None:
        """Ensure pages for positions [0, num_computed_tokens + num_new_tokens); all or nothing.
        `group`: the first group of a request that holds no pages yet (see `first_group`)."""
        if num_new_tokens < 0:
            raise ValueError(f"num_new_tokens must be >= 0, got {num_new_tokens}")
        if request.num_computed_tokens + num_new_tokens <= self.covered.get(request.request_id, 0):
            return
        short = self._shortfall(request, num_new_tokens)
        if short is None:
            raise OutOfPagesError(
                f"request {request.request_id} would hold {request.num_computed_tokens + num_new_tokens} "
                f"tokens, more than the {self.max_tokens_per_request} one request can ever hold"
            )
        allocs, h, kvp = self.allocators, self.first_group(request, group), self.kvp
        for b, n in enumerate(short):
            g = group_of_block(h, b, kvp)
            if n > allocs[g].num_free:
                raise OutOfPagesError(
                    f"request {request.request_id} needs {n} more pages in kvp group {g}, {allocs[g].num_free} free"
                )
        tables = self.tables.setdefault(request.request_id, [])
        self.first_groups[request.request_id] = h
        for b, n in enumerate(short):
            if b == len(tables):
                tables.append(array("i"))
            if n > 0:
                tables[b].extend(allocs[group_of_block(h, b, kvp)].allocate(n))
        if tables:  # full groups hold M positions each; the last one what its pages hold
            covered = (len(tables) - 1) * self.max_tokens_per_kvp_group + len(tables[-1]) * self.page_size
            self.covered[request.request_id] = covered

    def page_tables(self, request: Request) -> list[array]:
        """The request's pages, one int32 `array` of page ids per block it touches ([] when it
        holds none); block b lives on group (first_group + b) % kvp. Arrays rather than lists of
        ints: a step's snapshot of them (`StepInput.from_batch`) and its packing into the step's
        page-table array are then buffer copies, where a list's tens of thousands of int objects
        per step cost milliseconds of host time (`benchmarks/host_step_cost.py`)."""
        return self.tables.get(request.request_id, [])

    def holds(self, request: Request) -> bool:
        return request.request_id in self.tables

    # ---- prefix caching ----------------------------------------------------------------------
    def match_prefix(self, request: Request) -> int:
        """Give a request that holds no pages the cached pages of its longest cached prefix (whole
        pages, leaving at least one token to compute); returns the tokens they cover (0 without
        prefix caching or a hit). The caller sets `num_computed_tokens` to it."""
        if not self._may_reuse(request) or request.request_id in self.tables:
            return 0
        known = request.prompt_len + len(request.output_token_ids)
        tokens = request.token_ids_slice(0, known)
        h = self.prefix.first_group_of(tokens)
        if h is None:
            return 0
        hits = self.prefix.match(request.request_id, tokens, (known - 1) // self.page_size, h)  # taken for it
        if not hits:
            return 0
        tables: list[array] = []
        per = self.max_tokens_per_kvp_group // self.page_size
        for i, (_, page) in enumerate(hits):
            if i // per == len(tables):
                tables.append(array("i"))
            tables[-1].append(page)
        self.tables[request.request_id] = tables
        self.first_groups[request.request_id] = h
        n = len(hits) * self.page_size
        self.covered[request.request_id] = n
        return n

    def _may_reuse(self, request: Request) -> bool:
        """Prefix caching is on and the request may take cached pages: a prompt being scored
        (`SamplingParams.prompt_logprobs`) needs logits at every position, so it computes them all."""
        return self.prefix is not None and request.sampling_params.prompt_logprobs is None

    def peek_prefix(self, request: Request) -> int:
        """Tokens `match_prefix` would give the request now (0 without prefix caching); takes no
        pages and counts nothing. Costs one hash per cached page (and one for the first miss)."""
        if not self._may_reuse(request):
            return 0
        known = request.prompt_len + len(request.output_token_ids)
        tokens = request.token_ids_slice(0, known)
        h = self.first_groups.get(request.request_id)
        if h is None:
            h = self.prefix.first_group_of(tokens)
        return 0 if h is None else self.prefix.peek(tokens, (known - 1) // self.page_size, h) * self.page_size

    def commit(self, request: Request) -> None:
        """Index the request's pages that are full and computed (called after its KV advanced)."""
        prefix = self.prefix
        known = request.prompt_len + len(request.output_token_ids)  # a pending token's id is unknown
        full = min(request.num_computed_tokens, known) // self.page_size
        if prefix is None:
            return
        done = prefix.num_registered(request.request_id)
        if full <= done:
            return
        tables = self.tables[request.request_id]
        per = self.max_tokens_per_kvp_group // self.page_size
        ps, h, kvp = self.page_size, self.first_groups[request.request_id], self.kvp
        prefix.register(request.request_id, request.token_ids_slice(done * ps, full * ps), full,
                        lambda i: (group_of_block(h, i // per, kvp), tables[i // per][i % per]))

    def take_swap_ops(self) -> list[SwapOp]:
        """Device <-> host page copies issued since the last call, in order; the engine runs them
        before the next model step ([] without a host tier)."""
        return self.host.take_ops() if self.host is not None else []

    def clear_prefix_cache(self) -> None:
        """Forget every cached page's content (after the device KV cache was reset or a step failed)."""
        if self.prefix is not None:
            self.prefix.clear()

    def free(self, request: Request) -> int:
        """Release every page of the request; returns how many (0 if it held none)."""
        if self.prefix is not None:
            self.prefix.forget(request.request_id)
        tables = self.tables.pop(request.request_id, None)
        self.covered.pop(request.request_id, None)
        h = self.first_groups.pop(request.request_id, 0)
        if not tables:
            return 0
        n = 0
        for b, pages in enumerate(tables):
            self.allocators[group_of_block(h, b, self.kvp)].free(pages)
            n += len(pages)
        return n


__all__ = ["KVCacheManager", "OutOfPagesError"]

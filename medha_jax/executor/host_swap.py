"""Device <-> host copies of whole KV pages: the data side of the host tier (swap space).

  HostPageStore ops [("out", group, page, slot) | ("in", group, page, slot), ...] in issue order
    -> HostSwap.apply(ops, kv_k, kv_v) -> (kv_k, kv_v)
       runs of "out": gather the pages of every cache leaf (all layers), moved to host memory
                      (asynchronously: kept as device arrays until a restore or the next apply
                      needs them in the host pool)
       runs of "in":  host pool rows -> one scatter into the cache (donated, in place)

Page ids on the device are global: group g's local page p is g * pages_per_group + p (the cache's
page dimension is kvp groups of equal pools, sharded over "kvp"). Each cache leaf l (K and V; with
fp8 also their scales) has a host pool `pool[l]` [slots, L, *page dims] in the leaf's dtype,
allocated on first use; a slot holds one page of every layer. Index vectors are padded to a
power of two (at least 8) so few gather/scatter shapes compile: padding gathers page 0 and is
dropped, padding scatters write out of range and are dropped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from medha_jax.host_page_store import SwapOp


def _padded(n: int) -> int:
    return max(8, 1 << (n - 1).bit_length())


@jax.jit
def _gather(kv, idx):
    # kv: pytree of [L, N, ...] leaves; idx: i32[n] -> pytree of [n, L, ...]
    return jax.tree.map(lambda a: jnp.moveaxis(a[:, idx], 1, 0), kv)


class HostSwap:
    def __init__(self, num_slots: int, pages_per_group: int, kv_shardings):
        """kv_shardings: the (kv_k, kv_v) pytree of the cache's shardings (scatters keep them)."""
        self.num_slots = num_slots
        self.pages_per_group = pages_per_group
        self.pool: list[np.ndarray] | None = None  # per cache leaf: [slots, L, *page dims]
        self._pending: list[tuple[np.ndarray, list[jax.Array]]] = []  # (slots, gathered leaves)
        self._scatter = jax.jit(
            lambda kv, idx, rows: jax.tree.map(
                lambda a, r: a.at[:, idx].set(jnp.moveaxis(r, 0, 1).astype(a.dtype), mode="drop"), kv, rows),
            donate_argnums=0, out_shardings=kv_shardings)

    def _global(self, op: SwapOp) -> int:
        return op.group * self.pages_per_group + op.page

    def apply(self, ops: list[SwapOp], kv_k, kv_v):
        """Run the copies in order; returns the (new) cache."""
        kv = (kv_k, kv_v)
        i = 0
        while i < len(ops):
            j = i
            while j < len(ops) and ops[j].kind == ops[i].kind:
                j += 1
            run = ops[i:j]
            if run[0].kind == "out":
                self._save(kv, run)
            else:
                kv = self._restore(kv, run)
            i = j
        return kv

    def _save(self, kv, run: list[SwapOp]) -> None:
        n = len(run)
        idx = np.zeros(_padded(n), np.int32)
        idx[:n] = [self._global(op) for op in run]
        leaves = jax.tree.leaves(_gather(kv, idx))
        for a in leaves:
            a.copy_to_host_async()
        if self.pool is None:
            self.pool = [np.empty((self.num_slots, *a.shape[1:]), a.dtype) for a in leaves]
        self._pending.append((np.array([op.slot for op in run]), leaves))

    def flush(self) -> None:
        """Move every gathered page into the host pool (waits for its copy)."""
        for slots, leaves in self._pending:
            for pool, a in zip(self.pool, leaves):
                pool[slots] = np.asarray(a)[: len(slots)]
        self._pending.clear()

    def _restore(self, kv, run: list[SwapOp]):
        self.flush()
        if self.pool is None:
            raise RuntimeError("a page restore from host memory before any page was saved there")
        n = len(run)
        m = _padded(n)
        total = jax.tree.leaves(kv)[0].shape[1]
        idx = np.full(m, total, np.int32)  # out of range: dropped
        idx[:n] = [self._global(op) for op in run]
        slots = np.zeros(m, np.int64)
        slots[:n] = [op.slot for op in run]
        rows = jax.tree.unflatten(jax.tree.structure(kv), [pool[slots] for pool in self.pool])
        return self._scatter(kv, idx, rows)

    def clear(self) -> None:
        """Drop copies not yet moved to the pool (their entries are gone with the host tier's)."""
        self._pending.clear()


__all__ = ["HostSwap"]

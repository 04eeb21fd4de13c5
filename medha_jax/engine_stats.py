"""`EngineStats`: what front ends (health, metrics, model info, default max_tokens) may know
about a running engine, read in one call instead of reaching into its scheduler and KV manager.

  Engine.stats() -> EngineStats (plain numbers, a snapshot; safe to read from another thread:
  each field is one int read of the engine's state) -> server/openai_http.py, grpc_service.py,
  metrics.py, serve.py. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class EngineStats:
    num_waiting: int
    """Requests waiting for pages or their first schedule (including preempted ones)."""
    num_running: int
    """Requests holding KV pages (prefill or decode)."""
    free_kv_pages: int
    """Free KV-cache pages, all kvp groups together."""
    total_kv_pages: int
    """KV-cache pages, all kvp groups together (kvp x pages per group)."""
    page_size: int
    """Tokens per KV page."""
    max_tokens_per_request: int
    """Most tokens (prompt + output) one request's KV can ever hold."""
    last_iteration_time: float | None
    """Wall seconds of the latest engine iteration (None before the first)."""
    buckets_compiled: int = 0
    """Shape buckets compiled so far (the background compiler adds to it while serving)."""
    buckets_total: int = 0
    """Shape buckets of the ladders (the ones beyond the background compiler's eager set compile when first needed)."""
    padded_ticks: int = 0
    """Iterations run in a larger compiled bucket because their own was not compiled yet."""
    compile_waits: int = 0
    """Iterations that waited for their own bucket's compile (padding would have taken longer)."""
    prefix_queried_tokens: int = 0
    """Prompt tokens looked up in the prefix cache (0 with prefix caching off)."""
    prefix_hit_tokens: int = 0
    """Of those, tokens whose KV came from the cache."""
    host_kv_pages: int = 0
    """KV pages the host tier (swap space) can hold (0: no host tier)."""
    host_kv_pages_used: int = 0
    """Of those, pages holding KV now."""
    swapped_out_pages: int = 0
    """KV pages copied device -> host so far (evicted from the device prefix cache)."""
    swapped_in_pages: int = 0
    """KV pages copied host -> device so far (restored instead of recomputed)."""

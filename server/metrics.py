"""Prometheus metrics for one serving process, on a registry of its own.

  engine thread --AsyncEngine.iteration_listeners--> iteration-time histogram
  event loop    --AsyncEngine.output_listeners-----> TTFT / TPOT histograms, finished requests and tokens
  front ends    --rejected(reason)-----------------> rejected-request counters
  scrape        --EngineCollector.collect()--------> queue depth, running, in flight, KV pages,
                                                     last iteration time, recompilations (read live)

`render()` gives the text exposition format served at GET /metrics.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from medha_jax.outputs import RequestOutput

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class EngineCollector:
    """Gauges read from the engine at scrape time (plain ints/floats the engine thread updates)."""

    def __init__(self, async_engine):
        self.async_engine = async_engine

    def collect(self):
        eng = self.async_engine.engine
        st = eng.stats()
        values = [
            ("medha_queue_depth", "Requests waiting for their first schedule.", st.num_waiting),
            ("medha_running_requests", "Requests the scheduler is running (prefill or decode).", st.num_running),
            ("medha_inflight_requests", "Requests admitted by the server and not yet finished.", self.async_engine.num_inflight),
            ("medha_max_queue", "Most unfinished requests the server admits.", self.async_engine.max_queue),
            ("medha_kv_free_pages", "Free KV-cache pages (all kvp groups).", st.free_kv_pages),
            ("medha_kv_total_pages", "Total KV-cache pages (all kvp groups).", st.total_kv_pages),
            ("medha_last_iteration_seconds", "Wall time of the latest engine iteration.", st.last_iteration_time or 0.0),
            ("medha_engine_serving", "1 while the engine accepts requests.", 1 if self.async_engine.accepting else 0),
            ("medha_buckets_compiled", "Shape buckets compiled (grows while the background compiler works).", st.buckets_compiled),
            ("medha_buckets_total", "Shape buckets of the ladders.", st.buckets_total),
            ("medha_host_kv_pages", "KV pages the host tier (swap space) can hold.", st.host_kv_pages),
            ("medha_host_kv_pages_used", "KV pages held in the host tier.", st.host_kv_pages_used),
        ]
        for name, doc, value in values:
            g = GaugeMetricFamily(name, doc)
            g.add_metric([], float(value))
            yield g
        c = CounterMetricFamily("medha_recompilations", "XLA compilations after warm-up (should stay 0).")
        c.add_metric([], float(getattr(eng.executor, "compiles_after_warmup", 0)))
        yield c
        c = CounterMetricFamily("medha_padded_iterations", "Iterations run in a larger bucket while theirs compiled.")
        c.add_metric([], float(st.padded_ticks))
        yield c
        c = CounterMetricFamily("medha_compile_waits",
                                "Iterations that waited for their own bucket's compile (padding would have taken longer).")
        c.add_metric([], float(st.compile_waits))
        yield c
        c = CounterMetricFamily("medha_prefix_cache_queried_tokens", "Prompt tokens looked up in the prefix cache.")
        c.add_metric([], float(st.prefix_queried_tokens))
        yield c
        c = CounterMetricFamily("medha_prefix_cache_hit_tokens", "Prompt tokens whose KV came from the prefix cache.")
        c.add_metric([], float(st.prefix_hit_tokens))
        yield c
        c = CounterMetricFamily("medha_kv_swapped_out_pages", "KV pages copied from the device to host memory.")
        c.add_metric([], float(st.swapped_out_pages))
        yield c
        c = CounterMetricFamily("medha_kv_swapped_in_pages",
                                "KV pages copied from host memory back to the device instead of recomputed.")
        c.add_metric([], float(st.swapped_in_pages))
        yield c
        c = CounterMetricFamily("medha_engine_iterations", "Engine iterations run.")
        c.add_metric([], float(getattr(eng, "num_iterations", 0)))
        yield c


class ServerMetrics:
    def __init__(self, async_engine):
        self.registry = CollectorRegistry()
        r = self.registry
        self.iteration_time = Histogram("medha_iteration_seconds", "Engine iteration wall time.",
                                        buckets=_LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram("medha_ttft_seconds", "Time to first token (arrival to first token).",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram("medha_tpot_seconds", "Mean time per output token after the first, per request.",
                              buckets=_LATENCY_BUCKETS, registry=r)
        self.finished = Counter("medha_requests_finished", "Requests finished, by finish reason.",
                                ["finish_reason"], registry=r)
        self.rejected = Counter("medha_requests_rejected", "Requests refused before admission, by reason.",
                                ["reason"], registry=r)
        self.prompt_tokens = Counter("medha_prompt_tokens", "Prompt tokens of finished requests.", registry=r)
        self.generation_tokens = Counter("medha_generation_tokens", "Tokens generated by finished requests.", registry=r)
        r.register(EngineCollector(async_engine))
        self._async_engine = async_engine
        async_engine.output_listeners.append(self.observe_output)
        async_engine.iteration_listeners.append(self.iteration_time.observe)

    def detach(self) -> None:
        """Stop listening to the engine (when this server stops but the engine lives on)."""
        self._async_engine.output_listeners.remove(self.observe_output)
        self._async_engine.iteration_listeners.remove(self.iteration_time.observe)

    def observe_output(self, out: RequestOutput) -> None:
        if not out.finished:
            return
        self.finished.labels(out.finish_reason or "unknown").inc()
        self.prompt_tokens.inc(len(out.prompt_token_ids))
        self.generation_tokens.inc(len(out.token_ids))
        if out.metrics.ttft is not None:
            self.ttft.observe(out.metrics.ttft)
        if out.metrics.tpot is not None:
            self.tpot.observe(out.metrics.tpot)

    def reject(self, reason: str) -> None:
        self.rejected.labels(reason).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)

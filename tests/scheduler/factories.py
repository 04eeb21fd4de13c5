"""Test factories: requests, KV managers and schedulers with no device (vLLM-v1 style)."""

from __future__ import annotations

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.request import Request
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler import SchedulerConfig, make_scheduler as _make_scheduler


def make_requests(n: int = 1, prompt_len: int | list[int] = 16, max_tokens: int = 4, *,
                  arrival: float | list[float] = 0.0, prefix: str = "r", ttft_deadline=None) -> list[Request]:
    """`n` requests r0, r1, ... with prompts of `prompt_len` tokens (token i of request k = k*1000+i)."""
    lens = prompt_len if isinstance(prompt_len, list) else [prompt_len] * n
    arrivals = arrival if isinstance(arrival, list) else [arrival] * n
    deadlines = ttft_deadline if isinstance(ttft_deadline, list) else [ttft_deadline] * n
    return [
        Request(
            request_id=f"{prefix}{k}",
            prompt_token_ids=[(k * 1000 + i) % 32000 for i in range(lens[k])],
            sampling_params=SamplingParams(max_tokens=max_tokens),
            arrival_time=arrivals[k],
            ttft_deadline=deadlines[k],
        )
        for k in range(n)
    ]


def make_kv(num_pages: int = 64, page_size: int = 16, kvp: int = 1, max_tokens_per_kvp_group=None) -> KVCacheManager:
    return KVCacheManager(num_pages, page_size, kvp=kvp, max_tokens_per_kvp_group=max_tokens_per_kvp_group)


def make_scheduler(policy: str = "fcfs", *, num_pages: int = 64, page_size: int = 16, kvp: int = 1,
                   max_tokens_per_kvp_group=None, predictor=None, **config):
    cfg = SchedulerConfig(policy=policy, **config)
    kv = make_kv(num_pages, page_size, kvp, max_tokens_per_kvp_group)
    return _make_scheduler(cfg, kv, predictor)


def sample_all(sched, batch, now: float, token: int = 7) -> list[Request]:
    """What the engine does after a batch (the scheduler's own post-step update): advance, append
    `token` to each sampled request, finish those that stop. Returns the requests that finished."""
    sched.on_batch_done(batch, now)
    return sched.update_from_output(batch, token, now)


def shape(batch) -> list[tuple[str, int, int]]:
    """(request_id, start_pos, num_tokens) per scheduled sequence: easy to compare exactly."""
    return [(s.request_id, s.start_pos, s.num_tokens) for s in batch.seqs]


def request_of(rid: str, tokens, max_tokens: int = 4) -> Request:
    """A request with exactly these prompt tokens (prefix-cache tests)."""
    return Request(request_id=rid, prompt_token_ids=list(tokens), sampling_params=SamplingParams(max_tokens=max_tokens),
                   arrival_time=0.0)


def mark_computed(kv: KVCacheManager, req: Request, n: int) -> None:
    """What the scheduler does when a request's first n tokens are computed: pages, progress, index."""
    kv.allocate(req, n - req.num_computed_tokens)
    req.num_computed_tokens = n
    kv.commit(req)


def run_shared_prefix_traffic(s, rng, *, num_docs: int, steps: int, arrive_until: int, abort_every: int,
                              abort_at: int, token=lambda: 5, before_done=None, after_output=None) -> list[Request]:
    """Random requests that start with prefixes of `num_docs` random documents (plus a random
    tail) arrive at half the steps before `arrive_until`; one random live request is aborted every
    `abort_every` steps (at offset `abort_at`); every step schedules, calls before_done(s, batch),
    completes the batch with token() as every sampled token, then calls after_output(s, batch).
    Stops once everything finished after the arrivals; returns the requests."""
    docs = [[rng.randrange(1000) for _ in range(rng.randint(20, 90))] for _ in range(num_docs)]
    reqs, t = [], 0.0
    for step in range(steps):
        if step < arrive_until and rng.random() < 0.5:
            doc = rng.choice(docs)
            tail = [rng.randrange(1000) for _ in range(rng.randint(0, 12))]
            r = request_of(f"r{len(reqs)}", doc[: rng.randint(1, len(doc))] + tail, max_tokens=rng.randint(1, 40))
            s.add_request(r)
            reqs.append(r)
        if step % abort_every == abort_at and s.requests:
            s.abort(rng.choice(list(s.requests)).request_id)
        b = s.schedule(t)
        if before_done is not None:
            before_done(s, b)
        t += 1.0
        s.on_batch_done(b, t)
        s.update_from_output(b, token(), t)
        if after_output is not None:
            after_output(s, b)
        if step > arrive_until and not s.has_unfinished:
            break
    return reqs

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

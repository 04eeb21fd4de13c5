"""Workloads: what arrives when. Trace files and seeded generators -> a list of `RequestSpec`.

  CSV trace (arrival_s, prompt_tokens, output_tokens[, ttft_deadline_s]) --read_trace--> specs
  WorkloadSpec (qps, duration, long fraction, arrival process, seed) --generate--> specs
      short requests: ShareGPT4-like lognormal prompt/output lengths (prompts capped at 8K)
      long requests:  prompts uniform in [long_min, long_max], MEDHA-SWE-like output lengths
      arrivals:       Poisson, or gamma with a given coefficient of variation
      conversations (conversation_rate > 0), after the requests above: multi-turn chats over a
                      long document (uniform in [doc_min, doc_max], drawn from a pool of
                      `documents`, so users also share documents); turn k's prompt is the
                      document + every earlier question and answer + question k (ShareGPT4-like
                      lengths), `segments` naming the shared token runs; turn k > 0 `follows`
                      turn k-1 and arrives an exponential think time after its last token
  specs --write_trace--> CSV (so a generated workload can be replayed or committed; plain
                         requests only: a trace holds no token contents or conversations)

Deterministic for a seed (numpy's PCG64); conversations draw from their own stream, so adding
them leaves the other requests of a seed unchanged. Pure Python + numpy, no JAX.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass

import numpy as np

from medha_jax.sim.tokens import CONVERSATION_SEGMENTS

TRACE_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
OPTIONAL_COLUMNS = ("ttft_deadline_s",)

# Published summary statistics the generators are fitted to (checked in tests/sim/test_workload.py).
SHAREGPT4_PROMPT = {"mean": 2340, "median": 1730, "p90": 5696, "cap": 8192}
SHAREGPT4_OUTPUT = {"mean": 439, "median": 415}
MEDHA_SWE_OUTPUT = {"median": 518, "p90": 808}  # Medha 6.1: long-request decode lengths
_Z90 = 1.2815515655446004  # standard normal 90th percentile


@dataclass(frozen=True, slots=True)
class RequestSpec:
    arrival: float
    prompt_tokens: int
    output_tokens: int
    ttft_deadline: float | None = None
    """Seconds after arrival by which the first token is due (None: derived by the simulator)."""
    segments: tuple[tuple[int, int], ...] | None = None
    """The prompt's token ids as runs of (segment, length) (sim/tokens.py): prompts starting with
    the same segments share a prefix the prefix cache can reuse. None: token ids of its own."""
    follows: int | None = None
    """A conversation's next turn: the index, in the workload's list, of the request whose last
    token it waits for; it arrives `arrival` seconds after that token (the user's think time).
    None: `arrival` is the absolute arrival time."""
    reused_prefix: int = 0
    """Leading prompt tokens an earlier turn of the conversation already sent (document and
    history): the derived TTFT deadline counts only the work after them."""

    def __post_init__(self) -> None:
        if not (self.arrival >= 0 and math.isfinite(self.arrival)):
            raise ValueError(f"arrival must be a finite time >= 0, got {self.arrival!r}")
        if self.prompt_tokens < 1 or self.output_tokens < 1:
            raise ValueError(f"prompt_tokens and output_tokens must be >= 1, got {self.prompt_tokens}, {self.output_tokens}")
        if self.ttft_deadline is not None and not self.ttft_deadline > 0:
            raise ValueError(f"ttft_deadline must be > 0 seconds, got {self.ttft_deadline!r}")
        if self.segments is not None and sum(n for _, n in self.segments) != self.prompt_tokens:
            raise ValueError(f"segments hold {sum(n for _, n in self.segments)} tokens, prompt_tokens is {self.prompt_tokens}")
        if self.follows is not None and self.follows < 0:
            raise ValueError(f"follows must be a request index >= 0, got {self.follows}")
        if not 0 <= self.reused_prefix < self.prompt_tokens:
            raise ValueError(f"reused_prefix must be in [0, prompt_tokens), got {self.reused_prefix}")


# ---- trace files ------------------------------------------------------------------------------
def read_trace(path: str) -> list[RequestSpec]:
    """Read a CSV trace; ValueError naming the file, line and column on bad input. Sorted by arrival."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        cols = [c.strip() for c in (reader.fieldnames or [])]
        missing = [c for c in TRACE_COLUMNS if c not in cols]
        if missing:
            raise ValueError(f"{path}: trace needs columns {', '.join(TRACE_COLUMNS)} "
                             f"(optional {', '.join(OPTIONAL_COLUMNS)}); missing {', '.join(missing)}")
        reader.fieldnames = cols
        out = []
        for line, row in enumerate(reader, start=2):
            try:
                deadline = (row.get("ttft_deadline_s") or "").strip()
                out.append(RequestSpec(float(row["arrival_s"]), _int(row["prompt_tokens"]),
                                       _int(row["output_tokens"]), float(deadline) if deadline else None))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{line}: {e}") from None
    if not out:
        raise ValueError(f"{path}: trace has no requests")
    return sorted(out, key=lambda s: s.arrival)


def _int(text: str) -> int:
    v = float(text)
    if v != int(v):
        raise ValueError(f"token count must be an integer, got {text!r}")
    return int(v)


def write_trace(path: str, specs: list[RequestSpec]) -> None:
    if any(s.segments is not None or s.follows is not None for s in specs):
        raise ValueError("a trace file holds plain requests only (no token contents or conversations); "
                         "generate conversations from their WorkloadSpec instead")
    with_deadline = any(s.ttft_deadline is not None for s in specs)
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(TRACE_COLUMNS + (OPTIONAL_COLUMNS if with_deadline else ()))
        for s in specs:
            row = [f"{s.arrival:.6f}", s.prompt_tokens, s.output_tokens]
            if with_deadline:
                row.append("" if s.ttft_deadline is None else f"{s.ttft_deadline:g}")
            w.writerow(row)


# ---- length distributions ---------------------------------------------------------------------
def _capped_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ LogNormal(mu, sigma)."""
    from math import erf, exp, log, sqrt

    def phi(x):
        return 0.5 * (1.0 + erf(x / sqrt(2.0)))

    lc = log(cap)
    return exp(mu + sigma * sigma / 2) * phi((lc - mu - sigma * sigma) / sigma) + cap * (1 - phi((lc - mu) / sigma))


def fit_capped_lognormal(mean: float, median: float, p90: float, cap: float) -> tuple[float, float]:
    """(mu, sigma) with exp(mu) = median and sigma minimising the relative errors of the capped mean
    and the P90 (a 1-D golden-section search; the cap leaves median and P90 untouched when P90 < cap)."""
    mu = math.log(median)

    def err(sigma):
        m = _capped_lognormal_mean(mu, sigma, cap)
        q = math.exp(mu + _Z90 * sigma)
        return ((m - mean) / mean) ** 2 + ((q - p90) / p90) ** 2

    lo, hi = 0.05, 3.0
    g = (math.sqrt(5) - 1) / 2
    for _ in range(100):
        a, b = hi - g * (hi - lo), lo + g * (hi - lo)
        if err(a) < err(b):
            hi = b
        else:
            lo = a
    return mu, (lo + hi) / 2


def lognormal_from_mean_median(mean: float, median: float) -> tuple[float, float]:
    """(mu, sigma) of the lognormal with this mean and median (needs mean >= median)."""
    if mean < median:
        raise ValueError(f"a lognormal needs mean >= median, got mean={mean}, median={median}")
    return math.log(median), math.sqrt(2 * math.log(mean / median))


def lognormal_from_median_p90(median: float, p90: float) -> tuple[float, float]:
    return math.log(median), math.log(p90 / median) / _Z90


SHORT_PROMPT_PARAMS = fit_capped_lognormal(**SHAREGPT4_PROMPT)
SHORT_OUTPUT_PARAMS = lognormal_from_mean_median(**SHAREGPT4_OUTPUT)
LONG_OUTPUT_PARAMS = lognormal_from_median_p90(**MEDHA_SWE_OUTPUT)


def sample_short(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) token counts of n ShareGPT4-like requests."""
    mu, s = SHORT_PROMPT_PARAMS
    prompts = np.clip(np.rint(rng.lognormal(mu, s, n)), 1, SHAREGPT4_PROMPT["cap"]).astype(np.int64)
    mu, s = SHORT_OUTPUT_PARAMS
    outputs = np.maximum(np.rint(rng.lognormal(mu, s, n)), 1).astype(np.int64)
    return prompts, outputs


def sample_long(rng: np.random.Generator, n: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, output) token counts of n long requests: prompts uniform in [lo, hi]."""
    prompts = rng.integers(lo, hi + 1, n, dtype=np.int64)
    mu, s = LONG_OUTPUT_PARAMS
    outputs = np.maximum(np.rint(rng.lognormal(mu, s, n)), 1).astype(np.int64)
    return prompts, outputs


# ---- arrivals -----------------------------------------------------------------------------------
def arrival_times(rng: np.random.Generator, qps: float, duration: float, process: str = "poisson",
                  cv: float = 1.0) -> np.ndarray:
    """Arrival times in [0, duration): Poisson (exponential gaps) or gamma gaps with the given CV."""
    if not qps > 0 or not duration > 0:
        raise ValueError(f"qps and duration must be > 0, got {qps}, {duration}")
    n_max = int(qps * duration * 1.5 + 20 * math.sqrt(qps * duration) + 20)
    if process == "poisson":
        gaps = rng.exponential(1.0 / qps, n_max)
    elif process == "gamma":
        if not cv > 0:
            raise ValueError(f"gamma arrivals need cv > 0, got {cv}")
        k = 1.0 / (cv * cv)
        gaps = rng.gamma(k, 1.0 / (qps * k), n_max)
    else:
        raise ValueError(f"unknown arrival process {process!r}; valid: poisson, gamma")
    t = np.cumsum(gaps)
    return t[t < duration]


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """A generated workload: ShareGPT4-like short requests mixed with a fraction of long ones."""

    qps: float = 1.0
    duration: float = 3600.0
    long_fraction: float = 0.05
    long_min: int = 131072
    long_max: int = 1048576
    arrival: str = "poisson"
    cv: float = 1.0
    seed: int = 0
    conversation_rate: float = 0.0
    """Multi-turn long-document conversations started per second (Poisson; 0: none)."""
    doc_min: int = 65536
    doc_max: int = 524288
    """Document lengths (tokens), uniform in [doc_min, doc_max]."""
    documents: int = 0
    """Distinct documents the conversations draw from, uniformly (0: each conversation its own)."""
    turns: float = 4.0
    """Mean turns per conversation (geometric, at least 1)."""
    think: float = 60.0
    """Mean seconds from an answer's last token to the next question (exponential)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.long_fraction <= 1.0:
            raise ValueError(f"long_fraction must be in [0, 1], got {self.long_fraction}")
        if not 1 <= self.long_min <= self.long_max:
            raise ValueError(f"need 1 <= long_min <= long_max, got {self.long_min}, {self.long_max}")
        if not self.conversation_rate >= 0:
            raise ValueError(f"conversation_rate must be >= 0, got {self.conversation_rate}")
        if not 1 <= self.doc_min <= self.doc_max:
            raise ValueError(f"need 1 <= doc_min <= doc_max, got {self.doc_min}, {self.doc_max}")
        if self.documents < 0 or not self.turns >= 1 or not self.think >= 0:
            raise ValueError(f"need documents >= 0, turns >= 1, think >= 0; got {self.documents}, {self.turns}, {self.think}")


def generate(w: WorkloadSpec) -> list[RequestSpec]:
    """The requests of workload `w`, sorted by arrival; the same seed gives the same list."""
    rng = np.random.default_rng(w.seed)
    t = arrival_times(rng, w.qps, w.duration, w.arrival, w.cv)
    n = len(t)
    is_long = rng.random(n) < w.long_fraction
    sp, so = sample_short(rng, n)
    lp, lo = sample_long(rng, n, w.long_min, w.long_max)
    prompts = np.where(is_long, lp, sp)
    outputs = np.where(is_long, lo, so)
    specs = [RequestSpec(float(a), int(p), int(o)) for a, p, o in zip(t, prompts, outputs)]
    if w.conversation_rate > 0:
        specs += conversations(w, first_index=len(specs))
    return specs


def conversations(w: WorkloadSpec, first_index: int = 0) -> list[RequestSpec]:
    """The turns of w's conversations, each conversation's turns in order; `follows` indices
    count from `first_index` (where the list will start in the workload)."""
    rng = np.random.default_rng([w.seed, 1])  # a stream of its own (see the module docstring)
    starts = arrival_times(rng, w.conversation_rate, w.duration)
    n = len(starts)
    n_docs = w.documents or n
    doc_len = rng.integers(w.doc_min, w.doc_max + 1, n_docs, dtype=np.int64)
    doc_of = rng.integers(0, n_docs, n) if w.documents else np.arange(n)
    turns = rng.geometric(1.0 / w.turns, n)
    questions, answers = sample_short(rng, int(turns.sum()))
    think = rng.exponential(w.think, int(turns.sum())) if w.think > 0 else np.zeros(int(turns.sum()))
    out: list[RequestSpec] = []
    private = CONVERSATION_SEGMENTS
    j = 0
    for c in range(n):
        doc = int(doc_of[c])
        segments = [(doc, int(doc_len[doc]))]
        sent = 0
        for k in range(int(turns[c])):
            segments.append((private, int(questions[j])))
            prompt = sum(length for _, length in segments)
            out.append(RequestSpec(float(starts[c]) if k == 0 else float(think[j]), prompt, int(answers[j]),
                                   segments=tuple(segments), follows=None if k == 0 else first_index + len(out) - 1,
                                   reused_prefix=sent))
            segments.append((private + 1, int(answers[j])))  # the answer joins the history
            private += 2
            sent = prompt
            j += 1
    return out

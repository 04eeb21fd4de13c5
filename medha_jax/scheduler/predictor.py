"""Runtime predictor: one iteration's seconds from its composition, fitted to measured timings.

  profile samples (Composition, seconds) --fit (weighted NNLS)--> coefficients --save--> JSON profile
  JSON profile --load (checks model/mesh/dtype/device)--> RuntimePredictor
  packer: predictor.batch_cost() accumulates seqs, asks time() / time_with(q, kv) per candidate chunk
  engine: on_batch_done -> observe(composition, measured): measured / raw predicted -> correction
          (a slow average that leaves spells of slow or fast iterations out)

Model (per iteration; the layer count is folded into the coefficients):
  t = const + tokens * sum(q) + chunk_kv * sum_prefill(q * kv) + chunk_sq * sum_prefill(q^2)
        + decodes * n_decodes + decode_kv * sum_decode(kv) + tokens_maxctx * sum(q) * max(q + kv)
        + tile_kv * sum_prefill(wide-tile key walks) + mid_tile_kv * sum_prefill(mid-tile key walks)
        + small_tile_kv * sum_prefill(small-tile key walks)
        + decode_span * key slots of the batched decode loop   [+ tokens_sq * sum(q)^2]
where a pair (q, kv) is a decode when q == 1 and kv > 0, and kv counts tokens cached before the
iteration. The tiled terms follow the XLA attention backend's loops on this engine's shapes
(`attention_tiling.py`: the predictor carries the `Tiling` its profile was measured with): a
prefill chunk runs in 256-query tiles, then at most one 128-query tile, then 32-query tiles over its
last q % 128 tokens, each over its own causal frontier; decodes run together, every sequence slot
of the bucket stepping up to the longest decode (the second longest when the longest walks alone).
A chunk of 16 tokens costs as much attention as one of 32, and one of 128 about as much as one of
96; the linear terms alone missed the first by up to 40%
(`benchmarks/results/predictor_cpu.md`). On another backend NNLS gives them the weight the
measurements support (none, if they explain nothing). Coefficients are non-negative (fitted by
NNLS, relative-error weighted), so predictions grow with every kind of work, except that a chunk
reaching a multiple of 128 tokens may cost less than the one just below it (`chunk_period`: the
packer's search allows for it). Predictions are multiplied by an online correction, one for each
kind of iteration: `correction` for those holding a prefill chunk, `decode_correction` for
decode-only ones. Each is an exponential moving average (alpha 0.05) of its kind's
measured/raw-predicted ratios. One factor for both went wrong on the convoy benchmark (2-core VM,
`benchmarks/results/convoy_split_correction.md`): decode-only iterations there ran ~0.5x their
raw predictions, chunk iterations ~1.1x; the decode-only ones (nine in ten) pulled the shared
factor to 0.54, the packer sized chunks to budgets they overran 2x, and every chunk iteration
looked like a slow spell (slo halved the long prompt's budget for it). The average leaves spells
out: each ratio is clipped to within SPELL of its kind's average, and while the last two
iterations are both more than SPELL off their kind's average on the same side (a spell: on the
2-core VM, runs of 2-20 iterations 2-3.4x slower than predicted, in every policy's rounds of the
convoy benchmark) it does not move, unless the spell outlasts SPELL_LONGEST iterations (then it
is the new normal, and the average follows it). With every ratio averaged in, a spell raised the
correction by up to 45%, and the chunks of the ~40 iterations after it were 20-40% smaller than
the budget allowed; following the spell's speed instead (chunks cut to fit the budget at the slow
speed) cleared the queue of prefills slower than the overrunning iterations did
(`benchmarks/transient_slowdown.py`: 2.3x the missed deadlines; leaving spells out: 0.15-1.0x).
An iteration that starts more than IDLE_GAP after the last one ended is recorded but not averaged
in: a device's slow start after idle (1.15-1.25x on the 2-core VM) is not what back-to-back
iterations, a long prompt's chunks among them, pay.
`slowdown` is how much slower than raw predictions prefill work runs right now: the larger of
`correction` and `correction` times how far off the last iteration with a prefill chunk ran, so
that a slow spell shows at its first such iteration (decode-only ones, a few ms of host jitter, do
not count). Pure Python.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import os
import re
from dataclasses import asdict, dataclass

from medha_jax.scheduler.attention_tiling import DEFAULT_TILING, Tiling, decode_span, tile_walks, top_two
from medha_jax.scheduler.nnls import nnls
from medha_jax.scheduler.records import Composition

FEATURES = ("const", "tokens", "chunk_kv", "chunk_sq", "decodes", "decode_kv", "tokens_sq", "tokens_maxctx",
            "tile_kv", "decode_span", "small_tile_kv", "mid_tile_kv", "tile_steps")
ANALYTIC_FEATURES = ("const", "tokens", "chunk_kv", "chunk_sq", "decodes", "decode_kv", "tokens_maxctx")
"""For a device whose time is a smooth function of the work (the simulator's device models)."""
TILED_FEATURES = ("tile_kv", "mid_tile_kv", "small_tile_kv", "decode_span", "tile_steps")
"""The terms whose values depend on the engine's `Tiling`."""
TILE_PAIRS = ("tile_kv", "mid_tile_kv", "small_tile_kv")
"""The key-query pairs of the three prefill tile kinds: fitted as one coefficient (`fit`)."""
DEFAULT_FEATURES = ANALYTIC_FEATURES + (TILE_PAIRS, "decode_span", "tile_steps")
"""For measured profiles: adds the attention backend's tiling. A pair costs the same arithmetic in
any tile; what a narrow tile costs more per query is its loop's steps (each walks the same key blocks
for fewer queries), which tile_steps counts. Fitted apart, the three pair coefficients took up the
steps' cost as they averaged over contexts: on the convoy's engine they priced the 128-query tile
at 1.21-1.27x the 256-query one per query at 8K-30K keys, where the engine's tick measures
1.03x-0.98x (`benchmarks/xla_key_splits.py`); tied, 0.98-1.05x of the tick's times, at about the
same held-out error (10.8% vs 10.0% on that profile's 125 samples)."""
PROFILE_FORMAT = "medha-jax-runtime-profile"
PROFILE_VERSION = 12
"""Bumped whenever a feature's meaning, or how its samples are timed, changes (2: tile_kv counts 128-query
tiles, was 32; 3: the 32-query tiles are small_tile_kv, and the tiling is the engine's, stored in the
profile; 4: tile_kv counts 256-query tiles and at most one 128-query tile a chunk; 5: decode_span lets
the longest decode walk alone; 6: the 128-query tile is mid_tile_kv, tile_kv counts 256-query tiles
only; 7: the 128- and 32-query tiles walk key blocks side by side, `reference.key_splits`: the same
pairs, their coefficients ~0.9x and ~0.7x of version 6's on a CPU, so a version-6 profile overprices
them; 8: tile_steps counts the prefill tiles' key-loop steps, `attention_tiling.tile_steps`, and the
three tile kinds' pairs share one coefficient; 9: decodes walk their whole big blocks first,
`reference.decode_big_pages`: the same key slots at 0.74-0.94x the time where big blocks fit, so a
version-8 profile overprices them; 10: the same features, measured with a settle run before each timed
run of an iteration under 0.25 s, `runtime_profiler.SETTLE_BELOW`: a version-9 profile timed small
iterations after whatever ran before them, up to 4x their own cost: 13.4-16.6% held-out error on the
convoy's engine, 9.1-9.5% settled; 11: the widest prefill tile walks its whole unmasked key blocks two
at a time as one, `reference.XLA_PREFILL_BIG_BLOCKS`: tile_steps counts those steps, fewer than a
version-10 fit priced; 12: decodes walk big blocks only on AVX-512 hosts,
`reference.XLA_DECODE_BIG_BLOCK_BYTES`: an AVX2 host's version-11 profile timed its decodes with them,
1.1-1.5x slower than they now run)."""


class StaleProfileError(ValueError):
    """A profile written by code whose features meant something else: measure it again."""


@dataclass(frozen=True, slots=True)
class ProfileKey:
    """What a profile is valid for: timings from one setup do not transfer to another."""

    model: str
    mesh: str
    dtype: str
    device: str

    def filename(self) -> str:
        parts = [re.sub(r"[^A-Za-z0-9_.=,-]+", "-", p).strip("-") or "none" for p in asdict(self).values()]
        return "__".join(parts) + ".json"


def profile_path(directory: str, key: ProfileKey) -> str:
    return os.path.join(directory, key.filename())


def has_prefill(comp: Composition) -> bool:
    """Whether the iteration holds a prefill chunk (any pair but a decode: q == 1 over kv > 0)."""
    return any(q != 1 or kv == 0 for q, kv in comp.seqs)


def feature_sums(comp: Composition, tiling: Tiling = DEFAULT_TILING) -> list[float]:
    """The feature vector, in FEATURES order (see the module docstring).

    The decodes (hundreds in a batch) are summed by builtins over one comprehension; only the
    prefill chunks (a few) go through the per-pair loop."""
    seqs = comp.seqs
    decode_kvs = [kv for q, kv in seqs if q == 1 and kv > 0]
    decodes = len(decode_kvs)
    decode_kv = sum(decode_kvs)
    longest = tuple(heapq.nlargest(2, decode_kvs) + [0, 0])[:2]  # the two longest decodes
    max_dkv = longest[0]
    tokens, max_ctx = decodes, max_dkv + 1 if decodes else 0
    chunk_kv = chunk_sq = 0
    tiles = mid = small = steps = 0.0
    if decodes < len(seqs):
        for q, kv in seqs:
            if q == 1 and kv > 0:
                continue
            tokens += q
            max_ctx = max(max_ctx, q + kv)
            chunk_kv += q * kv
            chunk_sq += q * q
            b, m, s, k = tile_walks(tiling, q, kv)
            tiles += b
            mid += m
            small += s
            steps += k
    return [1.0, tokens, chunk_kv, chunk_sq, decodes, decode_kv, tokens * tokens, tokens * max_ctx, tiles,
            decode_span(tiling, len(seqs), longest), small, mid, steps]


def _linear_time(c, tiling, tokens, chunk_kv, chunk_sq, decodes, decode_kv, max_ctx, tiles, mid, small, steps, n,
                 longest) -> float:
    """The model over a batch's running sums (c: coefficients in FEATURES order; longest: the two
    longest decodes' cached lengths)."""
    return (c[0] + c[1] * tokens + c[2] * chunk_kv + c[3] * chunk_sq + c[4] * decodes
            + c[5] * decode_kv + c[6] * tokens * tokens + c[7] * tokens * max_ctx
            + c[8] * tiles + c[11] * mid + c[10] * small + c[12] * steps
            + (c[9] * decode_span(tiling, n, longest) if c[9] else 0.0))


SPELL = 1.3
"""How far (as a factor) the last two iterations must both be from the correction to be a spell;
also the most one ratio moves the correction towards it."""
SPELL_LONGEST = 50
"""Iterations after which a spell is taken for a lasting change: the correction follows it."""
IDLE_GAP = 0.05
"""An iteration that starts more than this many seconds after the previous one ended does not move
the online correction (`Scheduler.record`). On the convoy benchmark's 2-core VM prefill iterations
right after another ran at 0.97x their corrected predictions, after 0.1-0.3 s idle at 1.15x and after
more than 0.3 s at 1.25x (the machine's slow start after idle); the correction, learned while the
engine was a third busy, stood at 1.21-1.26 when the long prompt arrived and sized its chunks, all
back to back, for a device 20% slower than it was."""


class RuntimePredictor:
    """Linear model over `features`; unknown or missing coefficients are 0."""

    def __init__(self, coefficients: dict[str, float], *, key: ProfileKey | None = None,
                 tiling: Tiling = DEFAULT_TILING, ema_alpha: float = 0.05, fit_info: dict | None = None):
        bad = set(coefficients) - set(FEATURES)
        if bad:
            raise ValueError(f"unknown predictor features {sorted(bad)}; known: {', '.join(FEATURES)}")
        if any(not (v >= 0.0) for v in coefficients.values()):
            raise ValueError(f"predictor coefficients must be >= 0 (time grows with work), got {coefficients}")
        if not 0.0 <= ema_alpha <= 1.0:
            raise ValueError(f"ema_alpha must be in [0, 1], got {ema_alpha}")
        self.coefficients = {f: float(coefficients.get(f, 0.0)) for f in FEATURES}
        self._coef = [self.coefficients[f] for f in FEATURES]
        self.key = key
        self.tiling = tiling
        self.ema_alpha = ema_alpha
        self.correction = 1.0  # iterations with a prefill chunk: slow average of measured / raw predicted
        self.decode_correction = 1.0  # decode-only iterations: the same (spells left out of both)
        self.last_ratio = 1.0  # the last iteration's measured / raw predicted (clamped)
        self.last_off = 1.0  # the last iteration with a prefill chunk: its ratio / correction, how far off it ran
        self._off = 1.0  # the same against the correction before it was folded in (spells are told by it)
        self._spell = 0  # iterations in the current spell
        self.fit_info = dict(fit_info or {})

    # ---- prediction ------------------------------------------------------------------------
    def predict_raw(self, comp: Composition) -> float:
        """Seconds for the composition, without the online correction."""
        return sum(c * f for c, f in zip(self._coef, feature_sums(comp, self.tiling)) if c)

    def predict(self, comp: Composition) -> float:
        return self.predict_raw(comp) * (self.correction if has_prefill(comp) else self.decode_correction)

    def batch_cost(self) -> "BatchCost":
        return BatchCost(self)

    @property
    def chunk_period(self) -> int:
        """Chunk sizes at whose multiples the predicted time may drop (a chunk of mid_tile_q tokens
        can cost less than one of mid_tile_q - 32: one wide tile instead of several narrow ones; the
        multiples of tile_q are multiples of it); 0 when predictions never fall as a chunk grows.
        `chunking.largest_chunk` searches with it."""
        return self.tiling.mid_tile_q if self.coefficients["small_tile_kv"] > 0.0 else 0

    def chunk_time(self, q: int, kv: int) -> float:
        """Raw seconds of a batch holding one prefill chunk alone (used by the prefill-time cache)."""
        t = self.tiling
        if q == 1 and kv > 0:  # counted as a decode, exactly as predict_raw does
            return _linear_time(self._coef, t, 1, 0, 0, 1, kv, kv + 1, 0.0, 0.0, 0.0, 0.0, 1, (kv, 0))
        return _linear_time(self._coef, t, q, q * kv, q * q, 0, 0, q + kv, *tile_walks(t, q, kv), 1, (0, 0))

    # ---- online correction -----------------------------------------------------------------
    def observe(self, comp: Composition, measured: float) -> None:
        """Fold one measured iteration into its kind's correction (ratios clamped to [0.2, 5])."""
        self.observe_raw(self.predict_raw(comp), measured, has_prefill(comp))

    def observe_raw(self, raw: float, measured: float, prefill: bool = True) -> None:
        """`observe` given the raw prediction (e.g. the slowest kvp group's, `kvp_cost`) and the
        iteration's kind (prefill: it held a prefill chunk)."""
        if raw <= 0.0 or not measured > 0.0:
            return
        ratio = min(max(measured / raw, 0.2), 5.0)
        c = self.correction if prefill else self.decode_correction
        prev, off = self._off, ratio / c  # how far off its kind's average, before this one moves it
        self._off = off
        slow, fast = off > SPELL and prev > SPELL, off * SPELL < 1.0 and prev * SPELL < 1.0
        self._spell = self._spell + 1 if slow or fast else 0
        if self._spell == 0 or self._spell > SPELL_LONGEST:
            c += self.ema_alpha * (min(max(ratio, c / SPELL), c * SPELL) - c)
            if prefill:
                self.correction = c
            else:
                self.decode_correction = c
        self.last_ratio = ratio
        if prefill:
            self.last_off = ratio / c

    @property
    def slowdown(self) -> float:
        """How much slower than its raw predictions prefill work runs now, at least 1: the larger
        of the correction and the correction times how far off its kind's average the last
        iteration with a prefill chunk ran (a slow spell's first iteration shows at once, in the
        correction only after tens of iterations). Decode-only iterations do not count: on the
        convoy's CPU engine they take ~5 ms, of which a few ms of host jitter made one in five
        look 1.3-2.3x slow (~600 of 3,300 iterations a run), and each such reading shrank the
        next chunk's budget (`SLOPolicy.budget_scale`) and the deadline budget of the prompts it
        completed (`finish_budget`): a 32-token chunk of the long prompt where 128 fitted."""
        return max(1.0, self.correction, self.correction * self.last_off)

    @property
    def spell_ratio(self) -> float:
        """How much slower than its corrected predictions the last iteration with a prefill chunk
        ran, at least 1 (`slowdown` says why not a decode-only one; on
        a device steadily faster than its profile the correction is below 1, and this stays 1
        where slowdown / correction would not)."""
        return max(1.0, self.last_off)

    def reset_correction(self) -> None:
        self.correction = self.decode_correction = self.last_ratio = self.last_off = self._off = 1.0
        self._spell = 0

    # ---- fitting and scoring ---------------------------------------------------------------
    @classmethod
    def fit(cls, samples: list[tuple[Composition, float]], features: tuple = DEFAULT_FEATURES,
            *, key: ProfileKey | None = None, tiling: Tiling = DEFAULT_TILING,
            ema_alpha: float = 0.05) -> "RuntimePredictor":
        """Least squares on relative error (weights 1/seconds), coefficients >= 0; `tiling`: the
        attention loop shapes of the engine the samples were measured on. A tuple of features
        among `features` shares one coefficient (its terms are summed)."""
        groups = [(f,) if isinstance(f, str) else tuple(f) for f in features]
        unknown = {f for g in groups for f in g} - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown predictor features {sorted(unknown)}; known: {', '.join(FEATURES)}")
        samples = [(c, float(t)) for c, t in samples if t > 0.0 and c.seqs]
        if len(samples) < len(groups):
            raise ValueError(f"need at least {len(groups)} samples with positive times to fit {features}, got {len(samples)}")
        idx = [[FEATURES.index(f) for f in g] for g in groups]
        rows = []
        for c, _ in samples:
            f = feature_sums(c, tiling)
            rows.append([sum(f[i] for i in g) for g in idx])
        y = [t for _, t in samples]
        x = nnls(rows, y, weights=[1.0 / t for t in y])
        pred = cls({f: v for g, v in zip(groups, x) for f in g}, key=key, tiling=tiling, ema_alpha=ema_alpha)
        pred.fit_info = {"num_samples": len(samples), "features": [list(g) if len(g) > 1 else g[0] for g in groups],
                         "train_mape": pred.mape(samples)}
        return pred

    def mape(self, samples: list[tuple[Composition, float]], *, corrected: bool = False) -> float:
        """Mean absolute percentage error (as a fraction) of raw (or corrected) predictions."""
        errs = []
        for comp, t in samples:
            if t > 0.0:
                p = self.predict(comp) if corrected else self.predict_raw(comp)
                errs.append(abs(p - t) / t)
        if not errs:
            raise ValueError("no samples with positive measured time to score")
        return sum(errs) / len(errs)

    # ---- persistence -----------------------------------------------------------------------
    def fingerprint(self) -> str:
        """Stable hash of the coefficients and tiling (not the correction): keys derived caches."""
        blob = json.dumps({**{f: repr(v) for f, v in self.coefficients.items()}, "tiling": asdict(self.tiling)},
                          sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def to_json(self, samples: list[tuple[Composition, float]] | None = None) -> dict:
        data = {
            "format": PROFILE_FORMAT,
            "version": PROFILE_VERSION,
            "key": asdict(self.key) if self.key is not None else None,
            "coefficients": {f: v for f, v in self.coefficients.items() if v},
            "tiling": asdict(self.tiling),
            "fit": self.fit_info,
        }
        if samples is not None:
            data["samples"] = [[c.to_json(), t] for c, t in samples]
        return data

    def save(self, path: str, samples: list[tuple[Composition, float]] | None = None) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.to_json(samples), f, indent=1)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str, expect: ProfileKey | None = None, *, tiling: Tiling | None = None,
             ema_alpha: float = 0.05) -> "RuntimePredictor":
        """Read a profile; ValueError when it is not one, or was measured on another setup;
        StaleProfileError when it is an older version's, or (`tiling` given) was measured on an
        engine whose attention loops have other shapes (page size, smallest buckets)."""
        with open(path) as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
            raise ValueError(f"{path} is not a {PROFILE_FORMAT} file")
        if data.get("version") != PROFILE_VERSION:
            raise StaleProfileError(f"{path} has profile version {data.get('version')}, this code reads "
                                    f"{PROFILE_VERSION}")
        key = ProfileKey(**data["key"]) if data.get("key") else None
        if expect is not None and key != expect:
            raise ValueError(f"{path} was measured for {key}, not {expect}; run the profile command for this setup")
        coef = data["coefficients"]
        measured = Tiling(**data["tiling"])
        if tiling is not None and measured != tiling:
            if any(coef.get(f) for f in TILED_FEATURES):
                raise StaleProfileError(f"{path} was measured with attention loops {measured}, this engine runs "
                                        f"{tiling} (page size, smallest buckets or the backend's key blocks changed)")
            measured = tiling  # no tiled terms: the coefficients mean the same on any tiling
        return cls(coef, key=key, tiling=measured, ema_alpha=ema_alpha, fit_info=data.get("fit"))

    @staticmethod
    def load_samples(path: str) -> list[tuple[Composition, float]]:
        with open(path) as f:
            data = json.load(f)
        return [(Composition.from_json(c), float(t)) for c, t in data.get("samples", [])]


class BatchCost:
    """Running feature sums of a batch being packed: O(1) per added seq and per what-if query."""

    __slots__ = ("c", "tiling", "tiled", "corr", "dcorr", "tokens", "chunk_kv", "chunk_sq", "decodes", "decode_kv",
                 "max_ctx", "n", "tiles", "mid", "small", "steps", "longest")

    def __init__(self, predictor: RuntimePredictor, raw: bool = False):
        self.c = predictor._coef
        self.tiling = predictor.tiling
        self.tiled = bool(self.c[8] or self.c[10] or self.c[11] or self.c[12])  # else the tile terms are 0: skip counting
        self.corr = 1.0 if raw else predictor.correction  # a batch with a prefill chunk
        self.dcorr = 1.0 if raw else predictor.decode_correction  # a decode-only batch
        self.tokens = self.chunk_kv = self.chunk_sq = self.decodes = self.decode_kv = self.max_ctx = 0
        self.n = 0
        self.longest = (0, 0)  # the two longest decodes' cached lengths
        self.tiles = self.mid = self.small = self.steps = 0.0

    def add(self, q: int, kv: int, h: int = 0) -> None:
        """A sequence of q tokens over kv cached ones (h, its kvp group, is for `KVPBatchCost`)."""
        self.n += 1
        self.tokens += q
        self.max_ctx = max(self.max_ctx, q + kv)
        if q == 1 and kv > 0:
            self.decodes += 1
            self.decode_kv += kv
            self.longest = top_two(self.longest, kv)
        else:
            self.chunk_kv += q * kv
            self.chunk_sq += q * q
            if self.tiled:
                b, m, s, k = tile_walks(self.tiling, q, kv)
                self.tiles += b
                self.mid += m
                self.small += s
                self.steps += k

    def add_decodes(self, n: int, kv_sum: int, kv_max: int = 0, kv_second: int = 0) -> None:
        """n decodes whose cached lengths sum to kv_sum, the longest kv_max, the next kv_second."""
        if n:
            self.max_ctx = max(self.max_ctx, kv_max + 1)
            self.longest = top_two(top_two(self.longest, kv_max), kv_second)
        self.n += n
        self.tokens += n
        self.decodes += n
        self.decode_kv += kv_sum

    def _t(self, tokens, chunk_kv, chunk_sq, decodes, decode_kv, max_ctx, tiles, mid, small, steps, n,
           longest) -> float:
        corr = self.corr if tokens > decodes or chunk_kv or chunk_sq else self.dcorr  # with a chunk / decodes only
        return _linear_time(self.c, self.tiling, tokens, chunk_kv, chunk_sq, decodes, decode_kv, max_ctx, tiles,
                            mid, small, steps, n, longest) * corr

    def fixed(self) -> float:
        """Seconds every iteration pays however little it holds (the model's intercept): a
        prefill chunk alone pays it too, so it is no part of what decodes take from prefills."""
        return self.c[0] * self.corr

    def prefill_time(self) -> float:
        """`time()` at the correction of an iteration holding a prefill chunk, which a chunk added
        to this batch would make it (the decodes' share of such an iteration)."""
        if self.n == 0:
            return 0.0
        return _linear_time(self.c, self.tiling, self.tokens, self.chunk_kv, self.chunk_sq, self.decodes,
                            self.decode_kv, self.max_ctx, self.tiles, self.mid, self.small, self.steps, self.n,
                            self.longest) * self.corr

    def time(self) -> float:
        if self.n == 0:
            return 0.0
        return self._t(self.tokens, self.chunk_kv, self.chunk_sq, self.decodes, self.decode_kv, self.max_ctx,
                       self.tiles, self.mid, self.small, self.steps, self.n, self.longest)

    def time_with(self, q: int, kv: int, h: int = 0) -> float:
        """Predicted seconds if a prefill chunk of q tokens over kv cached tokens were added."""
        ctx = max(self.max_ctx, q + kv)
        if q == 1 and kv > 0:
            return self._t(self.tokens + 1, self.chunk_kv, self.chunk_sq, self.decodes + 1, self.decode_kv + kv, ctx,
                           self.tiles, self.mid, self.small, self.steps, self.n + 1, top_two(self.longest, kv))
        b, m, s, k = tile_walks(self.tiling, q, kv) if self.tiled else (0.0, 0.0, 0.0, 0.0)
        return self._t(self.tokens + q, self.chunk_kv + q * kv, self.chunk_sq + q * q, self.decodes, self.decode_kv,
                       ctx, self.tiles + b, self.mid + m, self.small + s, self.steps + k, self.n + 1, self.longest)

"""A convoy benchmark's workload replayed on the scheduler alone: policy decisions without machine noise.

    python benchmarks/convoy_replay.py benchmarks/results/convoy_load0.2_stable.json [--noise 0.3 --seeds 6]

Data flow: the convoy JSON's workload (arrivals, prompt and output lengths, TTFT deadlines), its
settings (pages, batch caps) and its chosen t_target / deadline_min, and the coefficients of the
runtime profile it ran with -> for each device speed factor (the device = that profile x factor,
optionally with lognormal per-iteration noise, seeded) and each policy: a real `Scheduler` driven
by `scheduler.replay` -> short TTFT P99 and misses, long TTFT and completion -> a markdown table on
stdout (and `--out FILE`).

Why: on the 2-core VM one round's busy seconds for the same requests vary by 15% between rounds,
and the long request's completion follows them; replaying the same arrivals on a simulated clock
shows what the policies decide, at each device speed, with nothing else moving. The profile is
the one the engine used; the factor stands in for how much slower the machine ran than profiled.
Pure Python, no JAX.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from medha_jax.kv_cache_manager import KVCacheManager  # noqa: E402
from medha_jax.request import Request  # noqa: E402
from medha_jax.sampling_params import SamplingParams  # noqa: E402
from medha_jax.scheduler import RuntimePredictor, SchedulerConfig, make_scheduler  # noqa: E402
from medha_jax.scheduler.attention_tiling import Tiling  # noqa: E402
from medha_jax.scheduler.config import TIME_BUDGET_POLICIES  # noqa: E402
from medha_jax.scheduler.replay import replay  # noqa: E402


def requests_of(workload: list[dict]) -> list[Request]:
    return [Request(request_id=w["request_id"], prompt_token_ids=[1] * w["prompt_len"],
                    sampling_params=SamplingParams(max_tokens=w["max_tokens"]), arrival_time=w["arrival_s"],
                    ttft_deadline=w["ttft_deadline_s"]) for w in workload]


def profile_predictor(profile: dict) -> RuntimePredictor:
    """The predictor a convoy run used. Runs before profile version 3 stored no tiling: they ran
    the default one, and their `tile_kv` coefficient counted the 32-query tiles too; before
    version 6 it counted the 128-query tile too."""
    coef = dict(profile["coefficients"])
    if profile.get("version", 0) < 6:
        coef.setdefault("mid_tile_kv", coef.get("tile_kv", 0.0))
    if "tiling" not in profile:
        coef["small_tile_kv"] = coef.get("tile_kv", 0.0)
        return RuntimePredictor(coef)
    return RuntimePredictor(coef, tiling=Tiling(**profile["tiling"]))


class Spells:
    """Stretches of time in which iterations run slow, as the engine's traces on the VM show them
    during the convoy's long prefill (0.4-2 s, 2-3.4x, two or three per prefill): during an iteration
    with prefill work (raw time >= `min_time`) a spell starts at `rate` per second of device time,
    lasts an exponential time of mean `length` seconds, and each iteration that starts inside it
    takes `low`..`high` times as long (uniform). Time-based, so a policy that shortens iterations
    does not shorten the spell. Seeded."""

    def __init__(self, rate: float, length: float, low: float, high: float, rng: random.Random,
                 min_time: float = 0.02):
        self.rate, self.length, self.low, self.high, self.rng, self.min_time = rate, length, low, high, rng, min_time
        self.clock = self.until = 0.0

    def __call__(self, t: float) -> float:
        if self.clock >= self.until and t >= self.min_time and self.rng.random() < 1.0 - math.exp(-self.rate * t):
            self.until = self.clock + self.rng.expovariate(1.0 / self.length)
        if self.clock < self.until:
            t *= self.rng.uniform(self.low, self.high)
        self.clock += t
        return t


def run(bench: dict, policy: str, factor: float, noise: float, seed: int, spells: tuple | None = None) -> dict:
    st, choice = bench["settings"], bench["choice"]
    pred = profile_predictor(bench["profile"])
    cap = st["max_num_batched_tokens"]  # runs before the time-budget cap had its own setting: one cap for all
    if policy in TIME_BUDGET_POLICIES and "time_budget_token_cap" in st:
        cap = st["time_budget_token_cap"]  # None: the engine's default
    cfg = SchedulerConfig(policy=policy, t_target=choice["t_target"], deadline_min=choice["deadline_min"],
                          max_num_batched_tokens=cap, max_num_seqs=st["max_num_seqs"],
                          prefill_cache_dir=None)
    sched = make_scheduler(cfg, KVCacheManager(st["num_pages"], st["page_size"]), pred)
    rng = random.Random(seed)
    slow = Spells(*spells, rng=random.Random(seed + 1_000_003)) if spells else None

    def device(comp) -> float:
        t = pred.predict_raw(comp) * factor
        t = t * rng.lognormvariate(0.0, noise) if noise else t
        return slow(t) if slow else t

    res = replay(sched, requests_of(bench["workload"]), device=device)
    kinds = {w["request_id"]: w["kind"] for w in bench["workload"]}
    short = sorted(res.ttft(r) for r in res.requests if kinds[r.request_id] == "short")
    longs = [r for r in res.requests if kinds[r.request_id] == "long"]
    misses = sum(res.ttft(r) > r.ttft_deadline for r in res.requests if kinds[r.request_id] == "short")
    return {"short_p99": short[min(len(short) - 1, int(0.99 * len(short)))], "short_misses": misses,
            "short_count": len(short), "long_ttft": max(res.ttft(r) for r in longs),
            "long_done": max(r.finish_time - r.arrival_time for r in longs),
            "long_missed": sum(res.ttft(r) > r.ttft_deadline for r in longs), "long_count": len(longs)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("convoy_json", help="a results JSON written by benchmarks/convoy.py")
    ap.add_argument("--policies", default="slo,edf")
    ap.add_argument("--factors", default="1.0,1.15,1.3,1.45", help="device time = profile x factor")
    ap.add_argument("--noise", type=float, default=0.15, help="lognormal sigma of per-iteration noise (second row per factor)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=1,
                    help="noisy rows: this many noise seeds from --seed on; misses summed, P99 / long times their median")
    ap.add_argument("--spells", default=None, metavar="RATE,LENGTH,LOW,HIGH",
                    help="slow spells on the noisy rows (`Spells`): e.g. 0.12,1.2,2,3.4, what the VM's traces show")
    ap.add_argument("--out", default=None, help="also write the table here")
    args = ap.parse_args(argv)
    bench = json.loads(Path(args.convoy_json).read_text())
    spells = tuple(float(x) for x in args.spells.split(",")) if args.spells else None
    lines = [f"# Convoy replay: `{Path(args.convoy_json).name}` on the scheduler alone",
             "", f"`python benchmarks/convoy_replay.py {args.convoy_json}`", "",
             f"t_target {bench['choice']['t_target']} s, deadline_min {bench['choice']['deadline_min']} s, "
             f"{len(bench['workload'])} requests; device = the run's profile x factor, per-iteration lognormal "
             f"noise sigma {args.noise} (seeds {args.seed}..{args.seed + args.seeds - 1}: misses summed over them, "
             f"times their median) where shown" + (f", with slow spells {args.spells} (rate /s, length s, low, high: "
                                                 f"`Spells`) on the noisy rows" if spells else "") + ".", "",
             "| factor | noise | policy | short TTFT P99 | short misses | long TTFT | long done after | long missed |",
             "|---|---|---|---|---|---|---|---|"]
    for factor in (float(x) for x in args.factors.split(",")):
        for noise in (0.0, args.noise):
            for policy in args.policies.split(","):
                runs = [run(bench, policy, factor, noise, args.seed + k, spells if noise else None)
                        for k in range(args.seeds if noise else 1)]
                r = {k: statistics.median(x[k] for x in runs) for k in ("short_p99", "long_ttft", "long_done")}
                r.update({k: sum(x[k] for x in runs) for k in ("short_misses", "short_count", "long_missed", "long_count")})
                lines.append(f"| {factor} | {noise} | {policy} | {r['short_p99']:.2f} s | {r['short_misses']}/{r['short_count']} "
                             f"| {r['long_ttft']:.2f} s | {r['long_done']:.2f} s | {r['long_missed']}/{r['long_count']} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

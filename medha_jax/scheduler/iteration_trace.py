"""An operator's per-iteration trace: one JSON line per engine iteration, and a summary of a trace.

  Scheduler.record(batch, now, measured)  (SchedulerConfig.iteration_trace set)
      -> IterationTrace.write: {"end", "measured", "predicted", "correction", "decode_correction", "spell_ratio",
                                "decodes", "decode_kv", "prefills": [[request id, start, tokens], ...]}
      -> the file, line-buffered (a crash loses at most the line being written)
  python -m medha_jax.scheduler.iteration_trace FILE [--spell 1.3]
      -> summarize(lines) / trace_stats(lines) (numbers for a results file): iterations, measured / predicted percentiles (all, with and without a
         prefill chunk), slow spells (runs of >= 2 iterations more than `spell` x predicted),
         the time they took and the prefill chunks inside them -> printed

Why: the convoy's misses came in short spells of iterations running 2-3x their predictions on
a shared VM; finding them took a patched engine. With this, `serve --iteration-trace FILE` shows
whether a deployment's device keeps to the runtime predictor, and which iterations do not.
`predicted` is the packer's corrected prediction, `correction` and `decode_correction` the
predictor's online factors (iterations with a prefill chunk, decode-only ones),
`spell_ratio` how much slower than the corrected predictions the device ran (`RuntimePredictor`),
all after this iteration was observed: what the packer acts on next. Times in seconds; `end` is the engine's clock when the tokens were back.
Pure Python, no JAX.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from medha_jax.batch import ScheduledBatch
from medha_jax.scheduler.predictor import SPELL


class IterationTrace:
    """Appends one JSON line per recorded iteration to `path`."""

    def __init__(self, path: str):
        try:
            self._file = open(path, "a", buffering=1, encoding="utf-8")
        except OSError as e:
            raise ValueError(f"iteration_trace: cannot open {path!r} for appending: {e}") from None
        self.path = path

    def write(self, batch: ScheduledBatch, end: float, measured: float | None, predictor) -> None:
        decodes, decode_kv, prefills = 0, 0, []
        for s in batch.seqs:
            if s.num_tokens == 1 and s.start_pos >= s.request.prompt_len:  # a decode
                decodes += 1
                decode_kv += s.start_pos
            else:
                prefills.append([s.request_id, s.start_pos, s.num_tokens])
        line = {"end": round(end, 6), "measured": measured, "predicted": batch.predicted_time,
                "correction": getattr(predictor, "correction", None),
                "decode_correction": getattr(predictor, "decode_correction", None),
                "spell_ratio": getattr(predictor, "spell_ratio", None),
                "decodes": decodes, "decode_kv": decode_kv, "prefills": prefills}
        self._file.write(json.dumps(line, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()


def _timed(lines: Iterable[dict]) -> list[dict]:
    """The lines with both a measured and a predicted time."""
    return [d for d in lines if d.get("measured") and d.get("predicted")]


def _at(ordered: list[float], q: float) -> float:
    """Nearest-rank `q` quantile of a sorted, non-empty list."""
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _percentiles(xs: list[float]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    return f"P50 {_at(xs, 0.5):.2f}  P90 {_at(xs, 0.9):.2f}  P99 {_at(xs, 0.99):.2f}  max {xs[-1]:.2f}"


def slow_spells(lines: list[dict], spell: float = SPELL) -> list[list[dict]]:
    """Runs of two or more iterations in a row measured above `spell` x predicted (lines with
    both times)."""
    spells, run = [], []
    for d in lines:
        if d["measured"] > spell * d["predicted"]:
            run.append(d)
            continue
        if len(run) >= 2:
            spells.append(run)
        run = []
    if len(run) >= 2:
        spells.append(run)
    return spells


def trace_stats(lines: Iterable[dict], spell: float = SPELL) -> dict:
    """Numbers for a results file: iterations, measured and predicted seconds, measured /
    predicted at P50 / P90 / P99, slow spells and their seconds."""
    its = _timed(lines)
    ratio = sorted(d["measured"] / d["predicted"] for d in its)
    at = lambda q: round(_at(ratio, q), 3) if ratio else None  # noqa: E731
    spells = slow_spells(its, spell)
    return {"iterations": len(its), "measured_s": round(sum(d["measured"] for d in its), 3),
            "predicted_s": round(sum(d["predicted"] for d in its), 3),
            "ratio_p50": at(0.5), "ratio_p90": at(0.9), "ratio_p99": at(0.99),
            "slow_spells": len(spells), "slow_spell_s": round(sum(d["measured"] for s in spells for d in s), 3)}


def summarize(lines: Iterable[dict], spell: float = SPELL) -> str:
    """The trace's iterations with both times, the measured / predicted ratios and its slow
    spells (two or more iterations in a row above `spell` x predicted)."""
    its = _timed(lines)
    if not its:
        return "no iterations with both a measured and a predicted time"
    ratio = [d["measured"] / d["predicted"] for d in its]
    with_chunk = [r for r, d in zip(ratio, its) if d["prefills"]]
    decode_only = [r for r, d in zip(ratio, its) if not d["prefills"]]
    spells = slow_spells(its, spell)
    busy = sum(d["measured"] for d in its)
    in_spells = sum(d["measured"] for s in spells for d in s)
    out = [f"{len(its)} iterations, {busy:.1f} s measured, {sum(d['predicted'] for d in its):.1f} s predicted",
           f"measured / predicted, all:               {_percentiles(ratio)}",
           f"  with a prefill chunk ({len(with_chunk):>6}):       {_percentiles(with_chunk)}",
           f"  decodes only ({len(decode_only):>6}):              {_percentiles(decode_only)}",
           f"slow spells (>= 2 iterations above {spell:g}x predicted): {len(spells)}, "
           f"{in_spells:.2f} s ({in_spells / busy:.1%} of the measured time)"]
    for s in spells[:20]:
        worst = max(d["measured"] / d["predicted"] for d in s)
        chunks = sum(len(d["prefills"]) for d in s)
        out.append(f"  ended {s[-1]['end']:.3f}: {len(s)} iterations, {sum(d['measured'] for d in s):.2f} s, "
                   f"up to {worst:.1f}x, {chunks} prefill chunks")
    if len(spells) > 20:
        out.append(f"  ... {len(spells) - 20} more")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="Summarize an iteration trace (serve --iteration-trace FILE).")
    ap.add_argument("trace")
    ap.add_argument("--spell", type=float, default=SPELL, help="measured / predicted above which an iteration is slow")
    args = ap.parse_args(argv)
    with open(args.trace, encoding="utf-8") as f:
        print(summarize(json.loads(line) for line in f if line.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

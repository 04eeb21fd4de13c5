"""The operator's iteration trace: one line per iteration, matching what ran, and its summary."""

import json

import pytest

from medha_jax.scheduler import RuntimePredictor
from medha_jax.scheduler.iteration_trace import main, summarize, trace_stats
from medha_jax.scheduler.replay import replay
from tests.scheduler.factories import make_requests, make_scheduler


def test_the_trace_has_a_line_per_iteration_with_what_ran_and_both_times(tmp_path):
    path = tmp_path / "trace.jsonl"
    s = make_scheduler("slo", num_pages=4096, predictor=RuntimePredictor({"tokens": 1e-5, "decodes": 1e-4}),
                       accept_within=0.0, iteration_trace=str(path))
    reqs = (make_requests(3, prompt_len=200, max_tokens=6, ttft_deadline=1.0)
            + make_requests(1, prompt_len=20_000, max_tokens=2, prefix="L", ttft_deadline=5.0))
    prompt_len = {r.request_id: r.prompt_len for r in reqs}
    calls = []

    def device(comp):  # iterations 3-5 run 3x their raw prediction: a slow spell
        calls.append(comp)
        return s.predictor.predict_raw(comp) * (3.0 if 3 <= len(calls) <= 5 else 1.0)

    res = replay(s, reqs, device=device)
    s.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert len(lines) == len(res.trace) == len(calls)
    for line, it, comp in zip(lines, res.trace, calls):
        assert line["end"] == pytest.approx(it.end)
        assert line["predicted"] == pytest.approx(it.predicted)
        assert line["measured"] == pytest.approx(it.end - it.start)
        assert [tuple(p) for p in line["prefills"]] == [x for x in it.seqs if x[1] < prompt_len[x[0]]]
        assert line["decodes"] + len(line["prefills"]) == len(comp.seqs)
    prompt_tokens = sum(n for line in lines for _, _, n in line["prefills"])
    assert prompt_tokens == 3 * 200 + 20_000
    assert lines[2]["spell_ratio"] > 2.5 and lines[-1]["spell_ratio"] == pytest.approx(1.0, abs=0.05)
    text = summarize(lines)
    assert f"{len(lines)} iterations" in text
    assert "slow spells (>= 2 iterations above 1.3x predicted): 1," in text and "3 iterations" in text


def test_summary_counts_only_runs_of_slow_iterations_as_spells(capsys, tmp_path):
    base = {"end": 0.0, "correction": 1.0, "spell_ratio": 1.0, "decodes": 4, "decode_kv": 400}
    ratios = [1.0, 2.0, 1.0, 2.5, 3.0, 1.0, 1.1, 1.2, 2.0, 2.0]  # one lone slow iteration, two spells
    lines = [dict(base, end=float(i), measured=0.1 * r, predicted=0.1, prefills=[["r", 0, 64]] if r > 1.5 else [])
             for i, r in enumerate(ratios)]
    text = summarize(lines)
    assert "slow spells (>= 2 iterations above 1.3x predicted): 2, 0.95 s" in text
    assert "ended 4.000: 2 iterations, 0.55 s, up to 3.0x, 2 prefill chunks" in text
    assert "ended 9.000: 2 iterations" in text
    assert "decodes only (     5):              P50 1.00" in text
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert main([str(path)]) == 0 and "10 iterations" in capsys.readouterr().out
    assert summarize([dict(base, measured=None, predicted=None, prefills=[])]).startswith("no iterations")


def test_an_unwritable_trace_path_is_a_clear_error(tmp_path):
    bad = tmp_path / "no-such-dir" / "trace.jsonl"
    with pytest.raises(ValueError, match="iteration_trace: cannot open .*no-such-dir"):
        make_scheduler("slo", predictor=RuntimePredictor({"tokens": 1e-5}), iteration_trace=str(bad))


def test_trace_stats_give_the_same_spells_as_the_summary():
    base = {"end": 0.0, "correction": 1.0, "spell_ratio": 1.0, "decodes": 4, "decode_kv": 400, "prefills": []}
    lines = [dict(base, measured=0.1 * r, predicted=0.1) for r in [1.0, 2.0, 1.0, 2.5, 3.0, 1.0, 2.0, 2.0]]
    st = trace_stats(lines)
    assert st["iterations"] == 8 and st["slow_spells"] == 2 and st["slow_spell_s"] == pytest.approx(0.95)
    assert st["ratio_p50"] == 2.0 and st["ratio_p99"] == 3.0 and st["predicted_s"] == pytest.approx(0.8)

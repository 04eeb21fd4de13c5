"""What the scheduler believes: a RuntimePredictor fitted to the simulated device."""

import pytest

from medha_jax.hardware import A100_80GB, LLAMA3_8B, AnalyticPerfModel
from medha_jax.scheduler.records import Composition
from medha_jax.sim.device_models import AnalyticDevice, ElasticSPDevice, LinearDevice
from medha_jax.sim.predictors import fit_predictor


def test_fitted_predictor_predicts_the_tick_on_held_out_iterations():
    device = AnalyticDevice(AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=8, spp=2))
    pred, info = fit_predictor(device, seed=3)
    assert info["test_mape"] < 0.10
    comp = Composition.of([(1, 5000)] * 20 + [(512, 0)])
    tick, latency = device.run(comp.seqs)
    assert pred.predict(comp) == pytest.approx(tick, rel=0.15) and latency > 1.5 * tick  # two stages
    assert pred.chunk_time(4096, 100_000) == pytest.approx(device.run([(4096, 100_000)])[0], rel=0.15)
    serial, _ = fit_predictor(AnalyticDevice(AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=8)), seed=3)
    assert all(v >= 0 for v in serial.coefficients.values())


def test_prefill_alone_streams_through_spp():
    one = AnalyticDevice(AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=8))
    two = AnalyticDevice(AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=8, spp=2))
    n = 300_000
    assert 1.7 < one.prefill_alone(n, 0.05) / two.prefill_alone(n, 0.05) < 2.1  # same chunks, half the layers
    assert two.prefill_alone(0, 0.05) == 0.0
    assert two.prefill_alone(100, 0.05) == pytest.approx(two.latency([(100, 0)]))
    lin = LinearDevice(1e-4)
    assert lin.prefill_alone(10_000, 0.05) == pytest.approx(1.0)


def test_elastic_sp_device_scales_whole_prompts_over_instances():
    inst = AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=2)
    dec = AnalyticDevice(AnalyticPerfModel(LLAMA3_8B, A100_80GB, tp=8, spp=2))
    e = ElasticSPDevice.from_analytic(inst, 8, dec)
    for n in (8192, 200_000, 1_000_000):
        alone = inst.iteration_time([(n, 0)])
        assert e.prefill_alone(n, 0.05) == pytest.approx(alone / 8, rel=0.25)  # fixed cost not divided
    t, lat = e.run([(1, 5000), (1, 100)])
    assert t == lat == pytest.approx(dec.latency([(1, 5000), (1, 100)]))
    with pytest.raises(ValueError):
        ElasticSPDevice(-1, 0, 0, dec)

"""`Experiment.run` results do not depend on the runs before it: the runtime predictor the runs
share starts every run with no online correction, as a fresh engine's does. Before, a worker
process of the policy study carried the last run's correction into the next, so a cell's
iteration count depended on which cells that worker had run first (edf at 0% long, 0.75 QPS:
168,007 / 168,369 / 168,689 iterations starting from a correction of 1.0 / 0.9 / 1.1)."""

from medha_jax.sim.experiment import Experiment
from medha_jax.sim.profiles import load_profile
from medha_jax.sim.workload import WorkloadSpec, generate


def test_a_run_starts_from_no_correction_whatever_ran_before():
    exp = Experiment(load_profile("llama3-8b-a100x16-tp8-spp2"), seed=0)
    specs = generate(WorkloadSpec(qps=0.75, duration=120, long_fraction=0.0, seed=0))
    fresh = exp.run("edf", specs, horizon=120)
    assert exp.predictor.correction != 1.0  # the run moved it (the fitted predictor is a few % off)
    exp.predictor.correction = 1.3  # as a run on a slower-than-predicted stretch could leave it
    again = exp.run("edf", specs, horizon=120)
    assert again.result.iterations == fresh.result.iterations
    assert again.summary["all"] == fresh.summary["all"]

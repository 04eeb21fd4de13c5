"""`runtime_profiler.measure` times each small iteration right after a run of its own composition.

The device here is a recording stand-in with a virtual clock, because what is under test is the
measuring loop's order, not the device: a composition costs its own time, plus LEFTOVER when the
batch before it was another composition (what a 1 s prefill chunk left behind made a 4 ms decode
take 11-15 ms on the 2-core VM). Small compositions must come out at their own cost; the big ones
(over SETTLE_BELOW in the first pass) are timed once per round, leftovers included.
"""

from medha_jax import runtime_profiler as rp
from medha_jax.executor.buckets import BucketLadders
from medha_jax.scheduler import Composition

LEFTOVER = 0.010


class RecordingExecutor:
    page_size = 16
    total_pages = 256
    kvp = 1

    def __init__(self, cost, clock):
        self.ladders = BucketLadders.build(max_tokens=512, max_seqs=8, max_pages=64)
        self.cost, self.clock = cost, clock
        self.compiled, self.ran = [], []

    def compile_bucket(self, bucket):
        self.compiled.append(bucket)

    def execute(self, batch):
        comp = Composition.of([(s.num_tokens, s.start_pos) for s in batch.seqs])
        self.clock.now += self.cost[comp] + (LEFTOVER if self.ran and self.ran[-1] != comp else 0.0)
        self.ran.append(comp)


class Clock:
    now = 0.0

    def perf_counter(self):
        return self.now


def test_small_iterations_are_timed_after_one_of_their_own(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(rp.time, "perf_counter", clock.perf_counter)
    cost = {Composition.of([(1, 64)] * 2): 0.004, Composition.of([(1, 256)]): 0.003,
            Composition.of([(32, 0)]): 0.006, Composition.of([(512, 256)]): 0.40}
    ex = RecordingExecutor(cost, clock)
    repeats = 3
    samples = dict(rp.measure(ex, list(cost), vocab_size=100, repeats=repeats, progress=False))
    big = Composition.of([(512, 256)])
    for comp, t in samples.items():
        if comp != big:
            assert abs(t - cost[comp]) < 1e-9, (comp, t)  # its own cost, whatever ran before it
    assert cost[big] <= samples[big] <= cost[big] + LEFTOVER
    # one untimed pass, then per round a settle run and a timed run of each small one, one run of the big one
    assert ex.ran.count(big) == 1 + repeats
    assert all(ex.ran.count(c) == 1 + 2 * repeats for c in cost if c != big)
    assert len(set(ex.compiled)) == len(ex.compiled)  # each bucket compiled once

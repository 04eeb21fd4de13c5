"""A batch keeps its decodes as parallel lists (`ScheduledBatch.decodes`), not one `ScheduledSeq`
each: every reader of those lists must see the batch that the `ScheduledSeq` view (`batch.seqs`)
describes. The references here read only that view, the way every consumer did before."""

from __future__ import annotations

from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.request import RequestStatus
from medha_jax.scheduler import SchedulerConfig, make_scheduler
from medha_jax.scheduler.predictor import RuntimePredictor
from medha_jax.scheduler.records import Composition
from medha_jax.scheduler.tpot_bank import decode_slack
from medha_jax.step_input import SeqInput, StepInput

from tests.scheduler.factories import make_requests, sample_all

PRED = {"const": 1e-3, "tokens": 1e-4}


def _mixed(kvp: int, *, pending: bool):
    """A scheduler whose next batch holds prefill chunks and decodes (two requests decoding, two
    prompts still prefilling), and that batch. pending: steps done as the asynchronous engine does
    them (tokens left pending on the device), so the decodes feed from the previous step."""
    kv = KVCacheManager(256, page_size=16, kvp=kvp, max_tokens_per_kvp_group=128 if kvp > 1 else None,
                        per_group_batches=kvp > 1)  # per-group batches: the requests spread over the groups
    sched = make_scheduler(SchedulerConfig(policy="slo", t_target=0.05, chunk_granularity=16, min_chunk=16,
                                           max_num_batched_tokens=96), kv, RuntimePredictor(PRED))
    early = make_requests(2, prompt_len=[30, 140], max_tokens=9, prefix="d")
    late = make_requests(2, prompt_len=[200, 120], max_tokens=9, prefix="p")
    for r in early:
        sched.add_request(r)
    now, prev = 0.0, None
    while not all(r.has_sampled for r in early):
        batch = sched.schedule(now)
        if pending:
            sched.on_batch_done(batch, now, tokens_pending=True)
            if prev is not None:
                sched.update_from_output(prev, 11, now)
            prev = batch
        else:
            sample_all(sched, batch, now, token=11)
        now += 0.05
    for r in late:
        sched.add_request(r)
    batch = sched.schedule(now)
    assert batch.chunks and len(batch.decodes) == 2, "the setup should give chunks and decodes together"
    return sched, batch, prev


def _seq_input(s, sampled_at) -> SeqInput:
    """StepInput's sequence for one `ScheduledSeq`, from its fields alone."""
    req = s.request
    sp = req.sampling_params
    pending = req.num_pending_tokens
    feed = sampled_at[req.request_id] if pending and s.samples else -1
    return SeqInput(req.request_id, s.start_pos, s.num_tokens, tuple(req.token_ids_slice(s.start_pos, s.kv_len)),
                    tuple(tuple(t) for t in s.page_tables), s.samples, sp.temperature, sp.top_k, sp.top_p,
                    req.seed, len(req.output_token_ids) + pending, feed, s.first_group, ())


def _normal(x: SeqInput) -> SeqInput:
    return x._replace(page_tables=tuple(tuple(t) for t in x.page_tables))


def test_the_seqs_view_lists_chunks_then_decodes_with_their_positions_tables_and_groups():
    for kvp in (1, 2):
        sched, batch, _ = _mixed(kvp, pending=False)
        seqs = batch.seqs
        assert [s.request_id for s in seqs[:len(batch.chunks)]] == [s.request_id for s in batch.chunks]
        decodes = seqs[len(batch.chunks):]
        assert [s.request for s in decodes] == batch.decodes
        for s in decodes:
            r = s.request
            assert (s.start_pos, s.num_tokens, s.samples, s.num_rows) == (r.num_computed_tokens, 1, True, 1)
            assert s.page_tables is sched.kv.tables[r.request_id]  # aliases the KV manager's, as chunks do
            assert s.first_group == sched.kv.first_groups.get(r.request_id, 0)
            assert not s.is_prefill
        assert batch.num_seqs == len(seqs) and batch.num_tokens == sum(s.num_tokens for s in seqs)
        assert batch.num_decodes == 2 and batch.num_rows == sum(s.num_rows for s in seqs)
        comp = Composition.from_batch(batch)
        assert comp.seqs == tuple((s.num_tokens, s.start_pos) for s in seqs)
        groups = tuple(s.first_group for s in seqs)
        assert comp.groups == (groups if any(groups) else None)
        if kvp > 1:
            assert batch.decode_groups is not None
        slack = [r.first_token_time + (r.num_output_tokens + r.num_pending_tokens) * 0.05 - 1.0
                 for r in batch.decodes]
        assert decode_slack(batch, 1.0, 0.05) == min(slack)


def test_the_step_input_of_the_decode_lists_is_the_one_of_their_seqs():
    for kvp in (1, 2):
        for pending in (False, True):
            sched, batch, prev = _mixed(kvp, pending=pending)
            sampled_at = None
            if pending:
                prev_in = StepInput.from_batch(prev, sampled_at={s.request_id: 0 for s in prev.seqs})
                sampled_at = {s.request_id: r for s, r in zip(prev_in.seqs, prev_in.last_rows()) if s.samples}
                assert all(r.num_pending_tokens == 1 for r in batch.decodes)
            got = StepInput.from_batch(batch, sampled_at)
            want = [_seq_input(s, sampled_at) for s in batch.seqs]
            assert [_normal(x) for x in got.seqs] == want
            assert all(x.feed >= 0 for x in got.seqs[len(batch.chunks):]) == pending


def test_a_decode_preempted_or_finished_while_in_flight_is_not_advanced():
    sched, batch, _ = _mixed(1, pending=False)
    gone, kept = batch.decodes
    at = kept.num_computed_tokens
    sched.finish(gone, RequestStatus.FINISHED_ABORTED, 1.0)
    sched.on_batch_done(batch, 1.0)
    assert kept.num_computed_tokens == at + 1 and kept not in sched._in_flight and gone not in sched._in_flight
    out = len(kept.output_token_ids)
    sched.update_from_output(batch, [5] * batch.num_seqs, 1.0)
    assert len(kept.output_token_ids) == out + 1 and kept.output_token_ids[-1] == 5

"""Batch mode starts without measuring a runtime profile: the provisional predictor of
`medha_jax.nominal_profile` (the model's arithmetic over this device's measured rates).

Checked: its coefficients are that arithmetic (per tick and device, so tp and spp divide them); an
`LLM(...)` in batch mode with no profile on disk starts on it, writes no profile and no
prefill-time table, and returns the tokens fcfs returns (greedy outputs do not depend on how the
batches were packed); a server (batch mode off) still measures and saves a profile.
"""

import pytest

from medha_jax import LLM, SamplingParams
from medha_jax.model.config import LlamaConfig
from medha_jax.nominal_profile import ATTENTION_EFFICIENCY, STEP_OVERHEAD, nominal_coefficients

GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
KW = dict(model="demo", mesh="tp=1", num_devices=1, max_model_len=256, num_pages=64, page_size=16,
          max_num_batched_tokens=64, max_num_seqs=8, min_token_bucket=32, min_page_bucket=8, warmup=False)
PROMPTS = ["Hello", [5, 6, 7, 8, 9] * 9, "a longer prompt than the first one"]
CFG = LlamaConfig(vocab_size=8192, hidden_size=512, intermediate_size=1536, num_layers=8, num_heads=8,
                  num_kv_heads=2, head_dim=64)


def test_the_coefficients_are_the_models_arithmetic():
    c = nominal_coefficients(CFG, tp=1, spp=1, weight_bytes=4, kv_bytes=4, flops=1e11, bandwidth=1e10)
    linear = 8 * (512 * (8 + 4) * 64 + 8 * 64 * 512 + 3 * 512 * 1536)  # 24.1M weights a token multiplies by
    assert linear == 24_117_248
    assert c["tokens"] == pytest.approx(2 * linear / 1e11)
    assert c["const"] == pytest.approx(STEP_OVERHEAD + (linear + 8192 * 512) * 4 / 1e10)
    assert c["chunk_kv"] == pytest.approx(8 * 8 * 64 * 4 / (1e11 * ATTENTION_EFFICIENCY))
    assert c["chunk_sq"] == pytest.approx(c["chunk_kv"] / 2)
    assert c["decode_kv"] == pytest.approx(8 * 2 * 2 * 64 * 4 / 1e10)
    assert c["decodes"] == pytest.approx(2 * 8192 * 512 / 1e11)
    # a device holds 1/tp of every layer's heads and MLP columns and 1/spp of the layers (a tick is one stage)
    half = nominal_coefficients(CFG, tp=2, spp=1, weight_bytes=4, kv_bytes=4, flops=1e11, bandwidth=1e10)
    assert half["tokens"] == pytest.approx(c["tokens"] / 2) and half["decode_kv"] == pytest.approx(c["decode_kv"] / 2)
    stage = nominal_coefficients(CFG, tp=1, spp=2, weight_bytes=4, kv_bytes=4, flops=1e11, bandwidth=1e10)
    assert stage["tokens"] == pytest.approx(c["tokens"] / 2) and stage["chunk_kv"] == pytest.approx(c["chunk_kv"] / 2)
    # kv heads are never split below one per device (replicated when tp > num_kv_heads)
    wide = nominal_coefficients(CFG, tp=8, spp=1, weight_bytes=4, kv_bytes=4, flops=1e11, bandwidth=1e10)
    assert wide["decode_kv"] == pytest.approx(c["decode_kv"] / 2)
    fp8 = nominal_coefficients(CFG, tp=1, spp=1, weight_bytes=2, kv_bytes=1, flops=1e11, bandwidth=1e10)
    assert fp8["decode_kv"] == pytest.approx(c["decode_kv"] / 4)
    # the XLA backend's decode loop walks every slot of the bucket up to the longest decode: priced per slot
    xla = nominal_coefficients(CFG, tp=1, spp=1, weight_bytes=4, kv_bytes=4, flops=1e11, bandwidth=1e10,
                               every_slot=True)
    assert xla["decode_span"] == pytest.approx(c["decode_kv"]) and "decode_kv" not in xla


def test_batch_mode_starts_on_the_provisional_predictor_and_saves_nothing(tmp_path):
    profiles, tables = tmp_path / "profiles", tmp_path / "tables"
    llm = LLM(scheduler="slo", profile_dir=str(profiles), prefill_cache_dir=str(tables), **KW)
    pred = llm.engine.scheduler.predictor
    assert pred.fit_info["kind"] == "nominal" and pred.fit_info["provisional"]
    assert pred.fit_info["matmul_flops"] > 0 and pred.fit_info["memory_bytes_per_s"] > 0
    assert pred.coefficients["decode_span"] > 0 and pred.coefficients["decode_kv"] == 0  # the XLA backend here
    outs = [o.token_ids for o in llm.generate(PROMPTS, GREEDY)]
    assert not (profiles.exists() and any(profiles.iterdir()))  # no profile was measured, nor written
    assert not (tables.exists() and any(tables.iterdir()))  # nor a prefill-time table keyed by its coefficients
    records = [r for r in llm.engine.scheduler.records if r.predicted]
    assert records and all(r.predicted > 0 for r in records)
    llm.close()
    fcfs = LLM(scheduler="fcfs", **KW)
    assert [o.token_ids for o in fcfs.generate(PROMPTS, GREEDY)] == outs
    fcfs.close()


def test_a_server_still_measures_and_saves_its_profile(tmp_path):
    llm = LLM(scheduler="slo", batch_mode=False, profile_dir=str(tmp_path), **KW)
    pred = llm.engine.scheduler.predictor
    assert pred.fit_info.get("kind") != "nominal" and pred.fit_info["num_samples"] > 10
    assert len(list(tmp_path.glob("*.json"))) == 1
    llm.close()

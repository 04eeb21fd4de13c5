"""LARS on a (tp=2, spp=2, kvp=2) mesh: time-budget chunks from the slowest kvp group's predicted
time, pipelined ticks, KVP merge; greedy tokens still equal transformers'. Then the profiler
times steady-state pipeline ticks on the same executor and leaves the pipeline empty.
"""

import json
from pathlib import Path

import jax
import pytest

from medha_jax import LLM, SamplingParams
from medha_jax.config import EngineConfig
from medha_jax.engine_builder import profile_key_for
from medha_jax.mesh import make_mesh
from medha_jax.runtime_profiler import measure
from medha_jax.scheduler import Composition, RuntimePredictor
from medha_jax.scheduler.predictor import profile_path

DATA = Path(__file__).resolve().parent.parent / "data" / "tiny-llama3"
MESH = "tp=2,spp=2,kvp=2"


def test_lars_on_a_3d_mesh_equals_transformers_and_profiles_ticks(tmp_path):
    golden = json.loads((DATA / "golden.json").read_text())
    kw = dict(model=str(DATA), mesh=MESH, dtype="float32", max_model_len=4096, num_pages=256,
              max_tokens_per_kvp_group=1536, min_page_bucket=32, profile_dir=str(tmp_path), warmup=False)
    key = profile_key_for(EngineConfig(**kw), make_mesh(MESH, devices=jax.devices()))
    # A hand-made profile: ~0.2 ms per token, so 50 ms budgets give chunks of a few hundred tokens.
    RuntimePredictor(dict(const=1e-3, tokens=2e-4, chunk_kv=1e-8, decodes=1e-4, decode_kv=1e-8),
                     key=key).save(profile_path(str(tmp_path), key))
    llm = LLM(scheduler="lars", batch_mode=False, max_num_batched_tokens=256, max_num_seqs=8, **kw)
    eng = llm.engine
    assert eng.scheduler.config.pipeline_depth == 2  # from the mesh: each tick gets half the per-token budget
    assert eng.scheduler.t_target == eng.scheduler.token_target / 2
    sp = SamplingParams(max_tokens=golden["new_tokens"], temperature=0.0, ignore_eos=True)
    outs = llm.generate([p["token_ids"] for p in golden["prompts"]], sp)
    assert [o.token_ids for o in outs] == [p["greedy"] for p in golden["prompts"]]
    chunks = {q for r in eng.scheduler.records for q, _ in r.composition.seqs if q > 1}
    assert len(chunks) > 2 and max(chunks) <= 256  # adaptive chunks, not one fixed size
    assert all(r.predicted is not None for r in eng.scheduler.records)

    comps = [Composition.of([(64, 0)]), Composition.of([(1, 300), (1, 40)])]
    samples = measure(eng.executor, comps, vocab_size=eng.model_config.vocab_size, repeats=2, progress=False)
    assert [c for c, _ in samples] == comps and all(t > 0 for _, t in samples)
    assert eng.executor.idle


def test_a_pipeline_depth_other_than_the_meshs_spp_is_refused(tmp_path):
    with pytest.raises(ValueError, match="pipeline_depth=3 does not match the mesh's spp=2"):
        LLM(model=str(DATA), mesh="spp=2", dtype="float32", max_model_len=512, num_pages=64, warmup=False,
            profile_dir=str(tmp_path), scheduler="lars", pipeline_depth=3)

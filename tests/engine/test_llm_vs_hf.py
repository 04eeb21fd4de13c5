"""The acceptance test of the whole path: greedy tokens from `LLM.generate` equal Hugging Face's.

Checkpoint dir -> loader -> sharded params -> fcfs scheduler (chunked prefills under a token
budget, decodes of finished prompts in the same iterations) -> paged KV cache -> executor ->
sampler. Prompts of 1 to 3000 tokens (many chunks, many pages) run together in one call, so
hybrid iterations mix prefill chunks with decodes. Reference tokens were made by
transformers itself (tools/make_golden.py) and committed under tests/data/.
"""

import json
import shutil
from pathlib import Path

import pytest

from medha_jax import LLM, SamplingParams

DATA = Path(__file__).resolve().parent.parent / "data"


def _golden(variant):
    return json.loads((DATA / variant / "golden.json").read_text())


def _model_dir(variant, spelling, tmp_path):
    if spelling == "rope_parameters":
        return str(DATA / variant)
    d = tmp_path / f"{variant}-legacy"
    shutil.copytree(DATA / variant, d)
    shutil.copy(d / "config_legacy.json", d / "config.json")
    return str(d)


def _llm(model_dir, tp, max_model_len=4096, **kw):
    # one token and one sequence bucket (page-table widths still vary): fewer programs to compile
    args = dict(model=model_dir, scheduler="fcfs", mesh=f"tp={tp}", num_devices=tp, dtype="float32",
                max_model_len=max_model_len, num_pages=512, max_num_batched_tokens=256, max_num_seqs=8,
                min_token_bucket=256, min_seq_bucket=8, warmup=False)
    return LLM(**{**args, **kw})


@pytest.mark.parametrize("variant,spelling,tp", [
    ("tiny-llama3", "rope_parameters", 1),
    ("tiny-llama3", "legacy", 1),
    ("tiny-llama3", "rope_parameters", 2),
    ("tiny-llama3", "legacy", 4),
    ("tiny-llama3-trained", "rope_parameters", 2),  # trained (tools/train_tiny.py), bf16 weights on disk
])
def test_greedy_tokens_equal_transformers(variant, spelling, tp, tmp_path):
    golden = _golden(variant)
    llm = _llm(_model_dir(variant, spelling, tmp_path), tp)
    prompts = [p["token_ids"] for p in golden["prompts"]]
    sp = SamplingParams(max_tokens=golden["new_tokens"], temperature=0.0, ignore_eos=True)
    outs = llm.generate(prompts, sp)
    for p, out in zip(golden["prompts"], outs):
        assert out.token_ids == p["greedy"], f"prompt of {len(p['token_ids'])} tokens"
        assert out.finish_reason == "length"
    assert llm.engine.kv_manager.num_free_pages == llm.engine.kv_manager.num_total_pages



def test_unrolled_layer_loop_gives_transformers_tokens():
    """layer_unroll >= the layer count: no loop of the step program carries the [L, ...] KV cache
    any more (the default's layer loop does), and the greedy tokens are still transformers'."""
    golden = _golden("tiny-llama3")
    layer_loops = {}
    for unroll in (1, 2):  # tiny-llama3 has 2 layers
        llm = _llm(str(DATA / "tiny-llama3"), 1, layer_unroll=unroll)
        ex = llm.engine.executor
        text = ex._step.lower(*ex._abstract_args(ex.ladders.pick(1, 1, 1))).as_text()
        kv = "tensor<" + "x".join(map(str, ex.kv_k.shape)) + "x"  # the whole stacked cache
        layer_loops[unroll] = sum(kv in line for line in text.splitlines() if "stablehlo.while" in line)
    assert layer_loops == {1: 1, 2: 0}
    sp = SamplingParams(max_tokens=golden["new_tokens"], temperature=0.0, ignore_eos=True)
    outs = llm.generate([p["token_ids"] for p in golden["prompts"]], sp)
    assert [o.token_ids for o in outs] == [p["greedy"] for p in golden["prompts"]]

@pytest.mark.slow
@pytest.mark.parametrize("variant,tp", [("tiny-llama2", 2), ("tiny-llama-tied", 1)])
def test_other_variants_greedy_tokens_equal_transformers(variant, tp, tmp_path):
    golden = _golden(variant)
    llm = _llm(str(DATA / variant), tp, max_model_len=None, page_size=8)  # no tokenizer shipped: token ids
    sp = SamplingParams(max_tokens=golden["new_tokens"], temperature=0.0, ignore_eos=True)
    outs = llm.generate([p["token_ids"] for p in golden["prompts"]], sp)
    assert [o.token_ids for o in outs] == [p["greedy"] for p in golden["prompts"]]


def test_checkpoint_without_tokenizer_serves_token_ids(tmp_path):
    """No tokenizer.json: token-id prompts still give transformers' tokens (text stays empty);
    a text prompt or a stop string is refused with a message that says why."""
    golden = _golden("tiny-llama3")
    d = tmp_path / "no-tokenizer"
    shutil.copytree(DATA / "tiny-llama3", d)
    (d / "tokenizer.json").unlink()
    (d / "tokenizer_config.json").unlink()
    llm = _llm(str(d), 1)
    assert llm.tokenizer is None
    prompts = [p["token_ids"] for p in golden["prompts"]]
    outs = llm.generate(prompts, SamplingParams(max_tokens=golden["new_tokens"], temperature=0.0, ignore_eos=True))
    for out, p in zip(outs, golden["prompts"]):
        assert out.token_ids == p["greedy"] and out.text == ""
    with pytest.raises(ValueError, match="no tokenizer.*token ids"):
        llm.generate(["hello"], SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="stop strings need a tokenizer"):
        llm.generate([prompts[0]], SamplingParams(max_tokens=2, stop=["x"]))
    assert not llm.engine.has_unfinished()


@pytest.mark.parametrize("swap_space_gb", [None, 0])
def test_exhausted_kv_swaps_to_host_and_still_equals_transformers(swap_space_gb):
    """190 pages of 16 tokens hold the 3000-token prompt alone: once its 64-token chunks have
    taken the pages the shorter prompts leave, a short one's decode needs a page and preempts it. With the host tier (the default) its computed pages come back from
    host memory and it recomputes at most its last partial page; with swap_space_gb=0 it
    recomputes from wherever the device prefix cache lost it. Tokens equal transformers' either way."""
    golden = _golden("tiny-llama3")
    golden["prompts"] = [golden["prompts"][i] for i in (4, 5, 0, 1, 2, 3)]  # 1000, 3000, the short ones
    llm = LLM(model=str(DATA / "tiny-llama3"), scheduler="fcfs", mesh="tp=1", num_devices=1, dtype="float32",
              max_model_len=4096, num_pages=190, max_num_batched_tokens=64, max_num_seqs=8, min_token_bucket=64,
              min_seq_bucket=8, warmup=False, swap_space_gb=swap_space_gb)
    prompts = [p["token_ids"] for p in golden["prompts"]]
    outs = llm.generate(prompts, SamplingParams(max_tokens=golden["new_tokens"], temperature=0.0, ignore_eos=True))
    assert [o.token_ids for o in outs] == [p["greedy"] for p in golden["prompts"]]
    eng = llm.engine
    assert eng.scheduler.num_preemptions > 0
    computed = sum(q for r in eng.scheduler.records for q, _ in r.composition.seqs)
    once = sum(len(p) + golden["new_tokens"] - 1 for p in prompts)  # every position computed once
    st = eng.stats()
    if swap_space_gb is None:
        assert st.swapped_in_pages > 0 and st.host_kv_pages > 0
        assert computed - once < 16 * eng.scheduler.num_preemptions  # at most a partial page each
    else:
        assert st.host_kv_pages == 0 and computed - once >= 16
    assert eng.kv_manager.num_free_pages == eng.kv_manager.num_total_pages

"""Stream pipeline parallelism overlaps the chunks of one prefill (Medha 3.3, Mnemosyne eq. 8).

With spp=4 a prefill of n chunks enters stage 0 on n consecutive ticks (chunk i+1 right after
chunk i, since it needs only chunk i's KV, which each stage has already written) and its token
leaves the last stage 3 ticks after the last chunk entered: n + 3 ticks, not 4n. Decodes of one
request wait for their token (4 ticks apart) while other requests fill the pipeline.
"""

import json
import shutil
from pathlib import Path

from medha_jax import LLM, SamplingParams

DATA = Path(__file__).resolve().parent.parent / "data"


def test_prefill_of_n_chunks_takes_n_plus_3_ticks_and_decodes_interleave(tmp_path):
    d = tmp_path / "m"
    shutil.copytree(DATA / "tiny-llama3-4l", d)
    shutil.copy(DATA / "tiny-llama3" / "tokenizer.json", d / "tokenizer.json")
    golden = json.loads((d / "golden.json").read_text())
    long_, short = golden["prompts"][2], golden["prompts"][1]
    chunk = 256
    llm = LLM(model=str(d), scheduler="fcfs", mesh="spp=4", num_devices=4, dtype="float32", max_model_len=4096,
              num_pages=256, max_num_batched_tokens=chunk, max_num_seqs=4, min_page_bucket=32, warmup=False)
    eng = llm.engine
    n = -(-len(long_["token_ids"]) // chunk)
    req = eng.add_request(long_["token_ids"], SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))
    ticks, fed = 0, []
    while not req.output_token_ids:
        eng.step()
        ticks += 1
        fed.append(req.num_computed_tokens)
    assert ticks == n + 3, f"{n} chunks took {ticks} ticks"
    assert fed[:n] == [min((i + 1) * chunk, len(long_["token_ids"])) for i in range(n)]  # a chunk per tick
    assert req.output_token_ids == long_["greedy"][:1]

    # Its decode now needs a full trip (4 ticks); a second request fills the pipeline meanwhile.
    other = eng.add_request(short["token_ids"], SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True))
    log = []
    while eng.has_unfinished():
        log.append([o.request_id for o in eng.step() if o.new_token_ids])
    assert req.output_token_ids == long_["greedy"][:2]
    assert other.output_token_ids == short["greedy"][:3]
    got = {rid: [i for i, ids in enumerate(log) if rid in ids] for rid in (req.request_id, other.request_id)}
    assert got[req.request_id] == [3]  # the decode fed on the first tick leaves on the fourth
    assert got[other.request_id] == [3, 7, 11]  # prefill in one tick, then one decode per pipeline trip

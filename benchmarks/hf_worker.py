"""Hugging Face side of benchmarks/vs_hf.py: a process in the Python that has torch and
transformers, driven over stdin/stdout with one JSON object per line.

    {"op": "make", "dir": D, "config": {...}, "seed": 0}        -> random LlamaForCausalLM saved to D (safetensors)
    {"op": "load", "dir": D[, "device": "cpu" | "cuda", "dtype": "float32" | "bfloat16"]}
                                                                -> the model on that device in that dtype
                                                                   (default cpu, float32), eval mode
    {"op": "generate", "prompts": [[ids]], "max_new_tokens": n} -> {"seconds", "tokens"}: greedy, all n tokens
    {"op": "prefill", "prompt": [ids]}                          -> {"seconds", "token"}: one forward, last logits only
    {"op": "info"}                                              -> versions and thread count

Every reply is one JSON line on stdout; timings cover the model call only (on a GPU, from a
synchronised device to the call's last kernel: `torch.cuda.synchronize` on both sides). On a GPU,
float32 matmuls stay exact (torch's default: no TF32).
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(max(1, torch.get_num_threads()))
    model, device = None, "cpu"

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    for line in sys.stdin:
        msg = json.loads(line)
        op = msg["op"]
        if op == "make":
            torch.manual_seed(msg.get("seed", 0))
            cfg = LlamaConfig(**msg["config"])
            m = LlamaForCausalLM(cfg).to(torch.float32)
            m.save_pretrained(msg["dir"], safe_serialization=True)
            reply = {"ok": True}
        elif op == "load":
            device = msg.get("device", "cpu")
            dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[msg.get("dtype", "float32")]
            model = LlamaForCausalLM.from_pretrained(msg["dir"], torch_dtype=dtype).to(device).eval()
            reply = {"ok": True, "attn": model.config._attn_implementation,
                     "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}
        elif op == "generate":
            ids = torch.tensor(msg["prompts"], dtype=torch.long, device=device)
            n = msg["max_new_tokens"]
            with torch.inference_mode():
                sync()
                t0 = time.perf_counter()
                out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n,
                                     do_sample=False, eos_token_id=None, pad_token_id=0)
                sync()
                sec = time.perf_counter() - t0
            reply = {"seconds": sec, "tokens": out[:, ids.shape[1]:].tolist()}
        elif op == "prefill":
            ids = torch.tensor([msg["prompt"]], dtype=torch.long, device=device)
            with torch.inference_mode():
                sync()
                t0 = time.perf_counter()
                logits = model(ids, logits_to_keep=1).logits
                token = int(logits[0, -1].argmax())  # waits for the forward (a device-to-host copy)
                sec = time.perf_counter() - t0
            reply = {"seconds": sec, "token": token}
        elif op == "info":
            reply = {"torch": torch.__version__, "transformers": transformers.__version__,
                     "threads": torch.get_num_threads(), "cuda": torch.cuda.is_available()}
        else:
            reply = {"error": f"unknown op {op!r}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

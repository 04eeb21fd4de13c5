"""Where an fp8 KV cache's error comes from, on a plain-JAX forward independent of the engine.

    python benchmarks/fp8_kv_emulated.py [--page-size 8]

Data flow: tests/data/tiny-llama3-trained (safetensors, config) -> a dense causal Llama forward in
plain jax.numpy (no paged cache, no kernels) over each golden prompt + its 32-token greedy
continuation, with K and V passed through one of several roundings before attention:
  bf16        K and V rounded to bfloat16 (the reference every other row is compared with)
  fp8         float8_e4m3fn at one power-of-two scale per page and kv head (what the engine stores)
  fp8 K only / fp8 V only
  rot fp8     q and k multiplied by the engine's `kv_cache.key_rotation` (orthonormal Hadamard)
              before K is rounded, V as fp8: what the engine does since cee0003
-> per variant, over the 160 teacher-forced positions: the greedy token's agreement with the bf16
row and the mean |log-probability drift| of the shared tokens -> results/fp8_kv_emulated.json, .md.
Why: the engine can only store both K and V as fp8; this separates the two and shows what the
rotation buys, on the same checkpoint the engine's benchmark (`fp8_kv.py`) uses.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import safetensors.numpy  # noqa: E402

from medha_jax.checkpoint.hf_config import load_hf_config  # noqa: E402
from medha_jax.model.kv_cache import key_rotation  # noqa: E402
from medha_jax.model.rope import apply_rope, inv_freq  # noqa: E402
from results_io import provenance, run_info, write_results  # noqa: E402

CKPT = Path(__file__).resolve().parent.parent / "tests" / "data" / "tiny-llama3-trained"
VARIANTS = {  # name: (key rounding, value rounding, rotate q and k)
    "bf16": ("bf16", "bf16", False),
    "fp8": ("fp8", "fp8", False),
    "fp8 K only": ("fp8", "none", False),
    "fp8 V only": ("none", "fp8", False),
    "rot fp8": ("fp8", "fp8", True),
    "rot fp8 K only": ("fp8", "none", True),
}


def round_kv(x, how: str, page: int):
    """x f32[T, K, Dh] -> rounded: none, bf16, or fp8 at a power-of-two scale per page and head."""
    if how == "none":
        return x
    if how == "bf16":
        return x.astype(jnp.bfloat16).astype(jnp.float32)
    T, K, Dh = x.shape
    n = -(-T // page)
    amax = jnp.pad(jnp.abs(x), ((0, n * page - T), (0, 0), (0, 0))).reshape(n, page, K, Dh).max(axis=(1, 3))
    scale = jnp.repeat(jnp.exp2(jnp.ceil(jnp.log2(jnp.maximum(amax / 448.0, 1e-30)))), page, axis=0)[:T]  # [T, K]
    y = jnp.clip(x / scale[..., None], -448.0, 448.0).astype(jnp.float8_e4m3fn).astype(jnp.float32)
    return y * scale[..., None]


def make_forward(w: dict, cfg, page: int):
    H, K, Dh = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    freq, rot = inv_freq(cfg), jnp.asarray(key_rotation(Dh))

    def rms(x, g):
        return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + cfg.rms_norm_eps) * g

    def forward(ids, k_how: str, v_how: str, rotate: bool):
        """ids i32[T] -> log-probabilities f32[T, V]."""
        T = ids.shape[0]
        pos = jnp.arange(T)
        x = w["model.embed_tokens.weight"][ids]  # x: f32[T, D]
        causal = jnp.tril(jnp.ones((T, T), bool))
        for layer in range(cfg.num_layers):
            p = f"model.layers.{layer}."
            h = rms(x, w[p + "input_layernorm.weight"])
            q = apply_rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, Dh), pos, freq)  # q: [T, H, Dh]
            k = apply_rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, K, Dh), pos, freq)  # k: [T, K, Dh]
            v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, K, Dh)
            if rotate:
                q, k = q @ rot, k @ rot
            k, v = round_kv(k, k_how, page), round_kv(v, v_how, page)
            kk, vv = jnp.repeat(k, H // K, axis=1), jnp.repeat(v, H // K, axis=1)  # [T, H, Dh]
            s = jnp.where(causal[None], jnp.einsum("thd,jhd->htj", q, kk) / np.sqrt(Dh), -jnp.inf)
            o = jnp.einsum("htj,jhd->thd", jax.nn.softmax(s, -1), vv).reshape(T, H * Dh)
            x = x + o @ w[p + "self_attn.o_proj.weight"].T
            h = rms(x, w[p + "post_attention_layernorm.weight"])
            mlp = jax.nn.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
            x = x + mlp @ w[p + "mlp.down_proj.weight"].T
        return jax.nn.log_softmax(rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T, -1)

    return jax.jit(forward, static_argnums=(1, 2, 3))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--page-size", type=int, default=8, help="tokens per fp8 scale (the engine's page size)")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    args = ap.parse_args(argv)
    report = run_info("fp8_kv_emulated.py", argv if argv is not None else sys.argv[1:], os.getloadavg())
    cfg = load_hf_config(CKPT)
    w = {k: jnp.asarray(v.astype(np.float32)) for k, v in safetensors.numpy.load_file(CKPT / "model.safetensors").items()}
    golden = json.loads((CKPT / "golden.json").read_text())
    fwd = make_forward(w, cfg, args.page_size)
    # every prompt + its greedy continuation but the last token: rows len(prompt)-1.. predict the continuation
    seqs = [(len(p["token_ids"]), jnp.asarray(p["token_ids"] + p["greedy"][:-1], jnp.int32)) for p in golden["prompts"]]
    logp = {name: [np.asarray(fwd(ids, *how))[n - 1:] for n, ids in seqs] for name, how in VARIANTS.items()}
    rows = {}
    for name in VARIANTS:
        same = total = 0
        drift = []
        for ref, got in zip(logp["bf16"], logp[name]):
            a, b = ref.argmax(-1), got.argmax(-1)
            same, total = same + int((a == b).sum()), total + len(a)
            both = a == b
            drift += np.abs(ref[np.arange(len(a)), a] - got[np.arange(len(a)), a])[both].tolist()
        rows[name] = {"same": same, "total": total, "drift_mean": float(np.mean(drift)), "drift_max": float(np.max(drift))}
    report.update(page_size=args.page_size, variants=rows)
    lines = ["# fp8 KV rounding, emulated on a plain-JAX forward", "", provenance(report), "",
             f"`tests/data/tiny-llama3-trained`, {rows['bf16']['total']} teacher-forced positions (5 golden prompts x 32 "
             f"continuation tokens), one fp8 scale per {args.page_size} tokens and kv head; every row against K and V "
             "rounded to bfloat16.", "",
             "| K / V rounding | same greedy token | logprob drift mean / max |", "|---|---|---|"]
    for name, r in rows.items():
        lines.append(f"| {name} | {r['same']} / {r['total']} ({100 * r['same'] / r['total']:.1f}%) | "
                     f"{r['drift_mean']:.3f} / {r['drift_max']:.3f} nats |")
    write_results(Path(args.out), "fp8_kv_emulated", report, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`load_model` where the engine builder imports it; the implementation is in `medha_jax.checkpoint`.

load_model(path_or_demo, mesh, dtype="bfloat16", require_tokenizer=True, seed=None)
    -> (LlamaConfig, params, Tokenizer | None)
"""

from medha_jax.checkpoint.load import load_model

__all__ = ["load_model"]

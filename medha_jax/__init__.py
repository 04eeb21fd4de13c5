"""medha-jax: long-context LLM serving in JAX (chunked prefills, LARS scheduling, (tp, spp, kvp) mesh).

Public API: `LLM`, `SamplingParams`, `RequestOutput`. `LLM` is imported lazily so that the
pure-Python parts (scheduler, simulator, request state) import without JAX.
"""

from medha_jax.outputs import RequestOutput
from medha_jax.sampling_params import SamplingParams

__all__ = ["LLM", "SamplingParams", "RequestOutput"]


def __getattr__(name):
    if name == "LLM":
        from medha_jax.llm import LLM

        return LLM
    raise AttributeError(f"module 'medha_jax' has no attribute {name!r}")

"""`LLM`: the offline Python API for notebooks and scripts, in the convention users know from vLLM.

    llm = LLM(model="demo" | "path/to/hf_dir", mesh="tp=2", dtype="float32", scheduler="lars")
    outs = llm.generate(["Hello", [1, 2, 3]], SamplingParams(max_tokens=24, temperature=0.0))

Keyword arguments are the fields of `EngineConfig` and `SchedulerConfig` (the same names as the
serve CLI's flags, with one different default: `batch_mode=True`, since an offline batch has no
TPOT target unless a request sets one). `generate` validates (and tokenizes, once) every prompt before queuing any, runs the engine loop
until all are done and returns one `RequestOutput` per prompt, in order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from medha_jax.config import EngineConfig
from medha_jax.engine import Engine
from medha_jax.outputs import RequestOutput
from medha_jax.sampling_params import SamplingParams
from medha_jax.scheduler import SchedulerConfig

Prompt = str | Sequence[int]


def split_config_kwargs(kwargs: dict) -> tuple[EngineConfig, SchedulerConfig]:
    """Route keyword arguments to EngineConfig or SchedulerConfig by field name."""
    if "scheduler" in kwargs:  # LLM(scheduler="lars") is the policy's user-facing name
        if "policy" in kwargs:
            raise TypeError("give the scheduling policy once: scheduler=... or policy=..., not both")
        kwargs = {**{k: v for k, v in kwargs.items() if k != "scheduler"}, "policy": kwargs["scheduler"]}
    e_names = {f.name for f in dataclasses.fields(EngineConfig)}
    s_names = {f.name for f in dataclasses.fields(SchedulerConfig)}
    unknown = set(kwargs) - e_names - s_names
    if unknown:
        raise TypeError(
            f"unknown LLM option(s) {sorted(unknown)}; valid options are {sorted(e_names | s_names)}"
        )
    kwargs = {"batch_mode": True, **kwargs}  # offline: no TPOT target unless a request gives one
    e = EngineConfig(**{k: v for k, v in kwargs.items() if k in e_names})
    s = SchedulerConfig(**{k: v for k, v in kwargs.items() if k in s_names})
    return e, s


class LLM:
    def __init__(self, model: str = "demo", **kwargs):
        engine_config, scheduler_config = split_config_kwargs({"model": model, **kwargs})
        self.engine = Engine(engine_config, scheduler_config)

    def close(self) -> None:
        """Release the device side (on a multi-host leader: stop the followers)."""
        self.engine.close()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        prompts = _as_prompt_list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            params = [sampling_params or SamplingParams()] * len(prompts)
        else:
            params = list(sampling_params)
            if len(params) != len(prompts):
                raise ValueError(f"got {len(params)} sampling_params for {len(prompts)} prompts")
        token_ids = []
        for i, p in enumerate(prompts):  # validate (and tokenize, once) all before queuing any
            try:
                token_ids.append(self.engine.validate_prompt(p))
            except ValueError as e:
                raise ValueError(f"prompt {i}: {e}") from None
        # stream=False: the engine makes each request's output once, when it ends
        ids = [self.engine.add_request(t, sp, stream=False).request_id for t, sp in zip(token_ids, params)]
        final: dict[str, RequestOutput] = {}
        wanted = set(ids)
        while wanted - final.keys():
            for out in self.engine.step():
                if out.finished and out.request_id in wanted:
                    final[out.request_id] = out
        return [final[i] for i in ids]


def _as_prompt_list(prompts) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    if isinstance(prompts, Sequence) and prompts and all(isinstance(t, int) for t in prompts):
        return [list(prompts)]  # one prompt given as token ids
    if isinstance(prompts, Sequence):
        return list(prompts)
    raise ValueError(f"prompts must be a string, a list of token ids, or a list of those; got {type(prompts).__name__}")

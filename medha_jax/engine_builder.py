"""Builds an engine's parts from its configs: mesh -> model + tokenizer -> executor -> KV pages -> scheduler.

  build_device_side: [jax.distributed] -> mesh ("tp=..,spp=..,kvp=.." or "preset:NAME")
                     -> params -> Executor (warmed up: every bucket, or on the leader with
                     background_compile only the one every batch fits)  every process of a mesh
  build_engine_parts: device side + KVCacheManager (kvp groups, progressive onboarding)
                     + predictor (measured now if none is on disk) + scheduler
                     -> the background compiler starts                 the leader / single process

Separated from the engine loop so the loop reads in one sitting, and so tools (profile,
benchmarks) and multi-host followers can build the same parts without the request lifecycle.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from dataclasses import dataclass, replace

import jax

from medha_jax.config import EngineConfig
from medha_jax.executor.buckets import Bucket, BucketLadders
from medha_jax.executor import multihost
from medha_jax.executor.executor import Executor
from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.mesh import make_mesh, mesh_size, parse_mesh
from medha_jax.model import sharding
from medha_jax.model.loading import load_model
from medha_jax.model.sharded_forward import kv_cache_bytes_per_page
from medha_jax.runtime_profiler import get_predictor
from medha_jax.scheduler import ProfileKey, SchedulerConfig, make_scheduler
from meshes import PREFIX as PRESET_PREFIX, load_preset
from pallas_kernels import kv_quant

log = logging.getLogger(__name__)


@dataclass
class EngineParts:
    model_config: object
    tokenizer: object
    mesh: jax.sharding.Mesh
    kv_manager: KVCacheManager
    scheduler: object
    scheduler_config: SchedulerConfig
    executor: Executor
    predictor: object
    max_model_len: int
    eos_token_ids: frozenset[int]


def resolve_attention_backend(name: str):
    """The paged-attention function for a backend name ("auto": pallas on GPU, xla elsewhere).

    The pallas one also carries `make_plan(page_table, cu_q_lens, q_offsets, kv_lens, **shapes)`:
    its per-step plan (`pallas_kernels.api.attention_plan`), which `llama.run_layers` builds once
    before the layer loop and passes to every layer as `plan=`."""
    from pallas_kernels.api import attention_plan, paged_attention

    if name == "auto":
        name = "pallas" if jax.default_backend() == "gpu" else "xla"

    def attention_fn(*args, scale, plan=None, **kv_scales):
        return paged_attention(*args, scale=scale, backend=name, plan=plan, **kv_scales)

    attention_fn.backend = name
    if name == "pallas":
        attention_fn.make_plan = attention_plan
    return attention_fn


def profile_key_for(config: EngineConfig, mesh) -> ProfileKey:
    """What a runtime profile is valid for: model, mesh shape, dtype and device kind."""
    model = config.model if config.model == "demo" else os.path.basename(os.path.normpath(config.model))
    d = mesh.devices.flat[0]
    shape = ",".join(f"{a}={n}" for a, n in mesh.shape.items())
    dtype = config.dtype if config.kv_cache_dtype == "auto" else f"{config.dtype},kv={config.kv_cache_dtype}"
    return ProfileKey(model=model, mesh=shape, dtype=dtype, device=f"{d.platform}:{d.device_kind}")


def _enable_compilation_cache(path: str | None) -> None:
    """Point JAX's persistent cache at `path` unless the process already chose one (tests do)."""
    if path is None or jax.config.jax_compilation_cache_dir:
        return
    jax.config.update("jax_compilation_cache_dir", os.path.expanduser(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def _jnp_dtype(name: str):
    return jax.numpy.float32 if name == "float32" else jax.numpy.bfloat16


DEFAULT_SWAP_SPACE_GB = 4.0


def _host_slots(config: EngineConfig, model_config, mesh, page: int) -> int:
    """Pages of the host KV tier: swap_space_gb over the bytes of one whole page (every layer and
    head, K and V: what one device holds of it times tp x spp)."""
    gb = config.swap_space_gb
    if gb is None:
        gb = DEFAULT_SWAP_SPACE_GB if config.enable_prefix_caching and jax.process_count() == 1 else 0.0
    if gb == 0:
        return 0
    lay = sharding.layout(model_config, mesh)
    per_page = kv_cache_bytes_per_page(model_config, mesh, page, _kv_dtype(config)) * lay.tp * lay.spp
    slots = int(gb * 1e9 // per_page)
    if slots < 1:
        raise ValueError(f"swap_space_gb={gb} holds no KV page ({per_page} bytes each)")
    return slots


def _kv_dtype(config: EngineConfig):
    """The KV cache's dtype: the model's ("auto") or float8_e4m3fn ("fp8_e4m3")."""
    return kv_quant.FP8 if config.kv_cache_dtype == "fp8_e4m3" else _jnp_dtype(config.dtype)


@dataclass
class DeviceSide:
    """What every process of a (multi-host) mesh builds: mesh, model, executor."""

    model_config: object
    tokenizer: object
    mesh: jax.sharding.Mesh
    executor: Executor
    max_model_len: int
    kv_manager: KVCacheManager
    """Page tables per kvp group (used by the leader only; built here so bad sizes fail early)."""


def build_device_side(config: EngineConfig, scfg: SchedulerConfig) -> DeviceSide:
    """jax.distributed (multihost) -> mesh (spec or preset) -> model -> executor (warmed up)."""
    if config.multihost:
        multihost.initialize(config)
    _enable_compilation_cache(config.compilation_cache_dir)
    mesh_spec = parse_mesh(config.mesh)
    visible, devices, need = jax.devices(), None, mesh_size(mesh_spec)  # devices None: make_mesh takes all
    if config.num_devices is not None:
        if config.num_devices > len(visible):
            raise ValueError(f"num_devices={config.num_devices} but only {len(visible)} devices are visible")
        devices = visible[: config.num_devices]
    elif not config.multihost and len(visible) > need:
        devices = visible[:need]  # the first N, as vLLM users expect
    mesh = make_mesh(mesh_spec, devices=devices)
    model_config, params, tokenizer = load_model(config.model, mesh, config.dtype, seed=config.seed,
                                                      load_format=config.load_format, require_tokenizer=False)
    if tokenizer is None:
        log.warning("%s has no tokenizer.json: prompts must be token ids, stop strings are refused and "
                    "outputs carry token ids with empty text", config.model)

    max_model_len = config.max_model_len or model_config.max_position_embeddings
    if max_model_len > model_config.max_position_embeddings:
        raise ValueError(
            f"max_model_len={max_model_len} exceeds the model's max_position_embeddings="
            f"{model_config.max_position_embeddings}"
        )
    page = config.page_size
    pages_per_group = config.num_pages  # per kvp group
    if pages_per_group is None:
        if config.kv_cache_memory_gb is not None:
            per_page = kv_cache_bytes_per_page(model_config, mesh, page, _kv_dtype(config))
            pages_per_group = int(config.kv_cache_memory_gb * 1e9 // per_page)
        else:
            pages_per_group = 1024
    group_tokens = config.max_tokens_per_kvp_group  # checked by the KVCacheManager
    if group_tokens is None:
        group_tokens = pages_per_group * page  # a preset's value, capped at a group's pool
        if config.mesh.strip().startswith(PRESET_PREFIX):
            group_tokens = min(load_preset(config.mesh.strip()).max_tokens_per_kvp_group or group_tokens, group_tokens)
    kvp = mesh_spec["kvp"]
    host_slots = _host_slots(config, model_config, mesh, page)
    # per_group_batches: each kvp group runs its own batch (the executor's layout, `model.inputs`)
    kv_manager = KVCacheManager(pages_per_group, page, kvp=kvp, max_tokens_per_kvp_group=group_tokens,
                                prefix_caching=config.enable_prefix_caching, host_slots=host_slots,
                                per_group_batches=True)  # validates

    ladders = BucketLadders.build(
        max_tokens=max_model_len if scfg.policy == "fcfs_nonchunked" else scfg.max_num_batched_tokens,
        max_seqs=scfg.max_num_seqs,
        max_pages=min(math.ceil(max_model_len / page), math.ceil(group_tokens / page)),
        min_tokens=config.min_token_bucket,
        min_seqs=config.min_seq_bucket,
        min_pages=config.min_page_bucket,
    )
    leader = jax.process_count() > 1 and jax.process_index() == 0
    executor = Executor(
        model_config, params, mesh, total_pages=pages_per_group * kvp, page_size=page,
        kv_dtype=_kv_dtype(config), ladders=ladders,
        attention_fn=resolve_attention_backend(config.attention_backend), layer_unroll=config.layer_unroll,
        group_tokens=group_tokens, channel=multihost.Channel() if leader else None, host_slots=host_slots,
    )
    if config.warmup:  # a multi-host follower replays the leader's buckets: it compiles them all first
        executor.warmup(progress=True, background=config.background_compile and jax.process_index() == 0)
    return DeviceSide(model_config, tokenizer, mesh, executor, max_model_len, kv_manager)


def padded_tick_seconds(predictor, b: Bucket) -> float:
    """Predicted seconds of a tick padded into bucket b: its token rows as b.seqs prefills with
    nothing cached (the padding's matmuls). The executor weighs it against a compile before a tick
    has run there: on a warm restart of `LLM(model=dir)` (31M Llama, 2-core VM) the first tick of
    two 64-token prompts ran padded into the 16,384-token cover bucket for 15.7 s (7.6 s without
    compiles beside it) while its own bucket loaded from the compilation cache in ~1 s."""
    cost = predictor.batch_cost()
    n = max(1, min(b.seqs, b.tokens))
    for _ in range(n):
        cost.add(b.tokens // n, 0)
    return cost.time()


def build_engine_parts(config: EngineConfig, scheduler_config: SchedulerConfig | None) -> EngineParts:
    """Everything the leader (process 0, or the only process) needs to serve."""
    scfg = scheduler_config if scheduler_config is not None else SchedulerConfig()
    dev = build_device_side(config, scfg)
    if scfg.pipeline_depth is None:  # the budget is per output token: one tick is 1/spp of it
        scfg = replace(scfg, pipeline_depth=dev.executor.depth)
    elif scfg.pipeline_depth != dev.executor.depth:
        raise ValueError(f"pipeline_depth={scfg.pipeline_depth} does not match the mesh's spp={dev.executor.depth}; "
                         f"leave it unset")
    kv_manager = dev.kv_manager
    predictor = get_predictor(config, scfg, dev.executor, profile_key_for(config, dev.mesh),
                              dev.model_config.vocab_size, dev.max_model_len)
    eos = dev.model_config.eos_token_id
    eos_ids = set([] if eos is None else (eos if isinstance(eos, list) else [eos]))
    eos_ids |= set(getattr(dev.tokenizer, "eos_token_ids", ()) or ())
    scheduler = make_scheduler(scfg, kv_manager, predictor, max_model_len=dev.max_model_len,
                               eos_token_ids=frozenset(eos_ids))
    build = getattr(scheduler.policy, "build", None)
    if build is not None:  # Algorithm 3's prefill-time tables, so no request pays for building them
        build(dev.max_model_len, scheduler.rescue_stretch)
    if predictor is not None:
        dev.executor.padded_estimate = functools.partial(padded_tick_seconds, predictor)
    dev.executor.start_background()  # after profiling: compiles would have skewed its timings
    return EngineParts(dev.model_config, dev.tokenizer, dev.mesh, kv_manager, scheduler, scfg, dev.executor,
                       predictor, dev.max_model_len, frozenset(eos_ids))

"""Device profiles by name: what the simulated deployment is, and how much KV it holds.

  "<preset>"                    a modelled deployment from PRESETS (analytic model, medha_jax.hardware)
  "model=..,device=..,tp=..,spp=..,kvp=..,kvp_tokens=..[,kvp_batches=replicated]"   any modelled
                                mesh; with kvp > 1 each group runs its own batch of the requests
                                placed on it (Mnemosyne), or with kvp_batches=replicated one batch
                                runs on every group (the comparison design)
  "path/to/profile.json"        a measured RuntimePredictor profile (the profile command's output)
  "linear:<s_per_token>[:<fixed_s>]"                       the toy device of worked examples
  --> Profile(device, elastic device for whole-prompt baselines, KV pages, kvp layout)

Measured and linear profiles have no FLOP model, so the whole-prompt baselines run on the device
itself there instead of on a derived elastic-SP device. Pure Python.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from medha_jax.hardware.device_specs import get_device
from medha_jax.hardware.models import get_model
from medha_jax.hardware.perf_model import AnalyticPerfModel
from medha_jax.kv_cache_manager import KVCacheManager
from medha_jax.sim.device_models import AnalyticDevice, ElasticSPDevice, LinearDevice, PredictorDevice

PRESETS = {
    # Medha 6.2 / 6.4: Llama-3 8B on two DGX-A100 servers, TP8-SPP2 (the policy study's device)
    "llama3-8b-a100x16-tp8-spp2": "model=llama3-8b,device=a100,tp=8,spp=2",
    "llama3-8b-a100x8-tp8": "model=llama3-8b,device=a100,tp=8",
    "llama3-8b-h100x8-tp8": "model=llama3-8b,device=h100,tp=8",
    # Medha 6.3: Llama-3 70B on H100, 2D (SPP8) vs 3D (SPP4-KVP2), TP8
    "llama3-70b-h100x64-tp8-spp8": "model=llama3-70b,device=h100,tp=8,spp=8",
    "llama3-70b-h100x64-tp8-spp4-kvp2": "model=llama3-70b,device=h100,tp=8,spp=4,kvp=2,kvp_tokens=1048576",
}

PAGE_SIZE = 16
DEFAULT_KV_TOKENS = 1 << 24
"""KV tokens per kvp group for profiles without a memory model (measured, linear)."""


@dataclass
class Profile:
    name: str
    device: object
    kv_tokens_per_group: int
    kvp: int = 1
    max_tokens_per_kvp_group: int | None = None
    elastic: object | None = None
    perf: AnalyticPerfModel | None = None
    info: dict = field(default_factory=dict)
    per_group_batches: bool = False
    """kvp > 1: each group runs its own batch (requests spread over the groups); else one batch
    replicated over the groups."""
    group_device: object | None = None
    """One kvp group alone (what the scheduler's predictor is fitted to: it costs each group's
    share of a batch); None: the device itself."""

    def kv_manager(self, page_size: int = PAGE_SIZE, prefix_caching: bool = False) -> KVCacheManager:
        pages = self.kv_tokens_per_group // page_size
        m = self.max_tokens_per_kvp_group
        if m is not None:
            m = min(m - m % page_size, pages * page_size)
        return KVCacheManager(pages, page_size, kvp=self.kvp, max_tokens_per_kvp_group=m, prefix_caching=prefix_caching,
                              per_group_batches=self.per_group_batches)

    def device_for(self, kind: str):
        if kind == "elastic_sp" and self.elastic is not None:
            return self.elastic
        return self.device

    def describe(self) -> dict:
        return {"name": self.name, "device": self.device.describe(), "kv_tokens_per_group": self.kv_tokens_per_group,
                "kvp": self.kvp, "max_tokens_per_kvp_group": self.max_tokens_per_kvp_group,
                "per_group_batches": self.per_group_batches,
                "elastic": None if self.elastic is None else self.elastic.describe(), **self.info}


def _parse_spec(text: str) -> dict:
    out = {}
    for part in text.split(","):
        if "=" not in part:
            raise ValueError(f"device spec {text!r}: expected key=value parts, got {part!r}")
        k, v = (s.strip() for s in part.split("=", 1))
        out[k] = v
    unknown = set(out) - {"model", "device", "tp", "spp", "kvp", "kvp_tokens", "kvp_batches"}
    if unknown:
        raise ValueError(f"device spec {text!r}: unknown keys {sorted(unknown)}; "
                         f"valid: model, device, tp, spp, kvp, kvp_tokens, kvp_batches")
    if out.get("kvp_batches", "per_group") not in ("per_group", "replicated"):
        raise ValueError(f"device spec {text!r}: kvp_batches must be per_group (each kvp group runs its own "
                         f"batch) or replicated (one batch on every group), got {out['kvp_batches']!r}")
    return out


def analytic_profile(spec: str, name: str | None = None) -> Profile:
    kw = _parse_spec(spec)
    model = get_model(kw.get("model", "llama3-8b"))
    dev = get_device(kw.get("device", "a100"))
    tp, spp, kvp = (int(kw.get(k, d)) for k, d in (("tp", 1), ("spp", 1), ("kvp", 1)))
    kvp_tokens = int(kw["kvp_tokens"]) if "kvp_tokens" in kw else None
    replicated = kw.get("kvp_batches", "per_group") == "replicated"
    perf = AnalyticPerfModel(model, dev, tp=tp, spp=spp, kvp=kvp, max_tokens_per_kvp_group=kvp_tokens,
                             kvp_replicated=replicated)
    device = AnalyticDevice(perf)
    group = AnalyticDevice(AnalyticPerfModel(model, dev, tp=tp, spp=spp)) if kvp > 1 else None
    cap = perf.kv_capacity_tokens()
    # the whole-prompt baselines: the same devices as TP2 instances with elastic SP over all of them
    n_dev = tp * spp * kvp
    inst_tp = min(2, tp)
    instance = AnalyticPerfModel(model, dev, tp=inst_tp)
    elastic = ElasticSPDevice.from_analytic(instance, n_dev // inst_tp, device)
    return Profile(name or perf.name, device, cap, kvp, kvp_tokens if kvp > 1 else None, elastic, perf,
                   per_group_batches=kvp > 1 and not replicated, group_device=group)


def load_profile(text: str, kv_tokens: int | None = None) -> Profile:
    """A Profile from a preset name, a key=value mesh spec, a measured JSON profile or linear:..."""
    if text in PRESETS:
        p = analytic_profile(PRESETS[text], text)
    elif text.startswith("linear:"):
        parts = text.split(":")[1:]
        try:
            nums = [float(x) for x in parts]
        except ValueError:
            raise ValueError(f"linear device {text!r}: expected linear:<seconds per token>[:<fixed seconds>]") from None
        p = Profile(text, LinearDevice(*nums), DEFAULT_KV_TOKENS)
    elif text.endswith(".json"):
        if not os.path.exists(text):
            raise ValueError(f"device profile {text!r} does not exist")
        from medha_jax.scheduler.predictor import RuntimePredictor

        pred = RuntimePredictor.load(text)
        p = Profile(os.path.basename(text), PredictorDevice(pred, os.path.basename(text)), DEFAULT_KV_TOKENS)
    elif "=" in text:
        p = analytic_profile(text)
    else:
        raise ValueError(f"unknown device profile {text!r}: give a preset ({', '.join(PRESETS)}), "
                         f"a spec like model=llama3-8b,device=a100,tp=8,spp=2, a measured .json profile, "
                         f"or linear:<seconds per token>")
    if kv_tokens is not None:
        if kv_tokens < PAGE_SIZE:
            raise ValueError(f"kv_tokens must be >= {PAGE_SIZE}, got {kv_tokens}")
        p.kv_tokens_per_group = kv_tokens
    return p

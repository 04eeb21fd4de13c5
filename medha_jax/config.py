"""EngineConfig: what to serve and on what (model, mesh, dtype, KV cache, kernels, shapes).

Scheduling knobs live in `medha_jax.scheduler.config.SchedulerConfig`. Both are plain typed
dataclasses validated on construction; their field docstrings are the CLI's --help text
(`medha_jax.cli_args` builds the flags from them), so `LLM(...)` and `serve` share defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

ATTENTION_BACKENDS = ("auto", "xla", "pallas")
DTYPES = ("float32", "bfloat16")
KV_CACHE_DTYPES = ("auto", "fp8_e4m3")
LOAD_FORMATS = ("auto", "dummy")


@dataclass(slots=True)
class EngineConfig:
    model: str = "demo"
    """HF model directory (config.json, *.safetensors, tokenizer.json), or "demo" for the built-in tiny Llama.
    Without tokenizer.json the model serves token-id prompts only (outputs: token ids, empty text)."""
    load_format: str = "auto"
    """"auto": the model directory's weights; "dummy": seeded random weights of the shape its
    config.json describes (no *.safetensors needed), for benchmarks and smoke tests of large models."""
    mesh: str = "tp=1"
    """Device mesh, e.g. "tp=8,spp=4,kvp=2" (axes not named are 1; it runs on the first
    tp*spp*kvp devices), or a named deployment preset from meshes/, e.g. "preset:llama3-70b-16node"."""
    num_devices: int | None = None
    """Use the first N local devices; the mesh's size must equal it (default: as many as the mesh
    needs, the first ones; multi-host meshes take every device)."""
    dtype: str = "float32"
    """Weights, activations and (with kv_cache_dtype "auto") KV cache dtype: float32 or bfloat16."""
    kv_cache_dtype: str = "auto"
    """KV cache storage: "auto" (the model's dtype) or "fp8_e4m3" (float8_e4m3fn with one float32
    scale per page and kv head: about half a bfloat16 cache's bytes, so kv_cache_memory_gb holds
    about twice the pages)."""
    attention_backend: str = "auto"
    """Paged attention: "xla" (plain jax.numpy), "pallas" (Pallas kernels; interpret mode off-GPU), "auto" (pallas on GPU, xla elsewhere)."""
    page_size: int = 16
    """Tokens per KV-cache page."""
    layer_unroll: int = 1
    """Decoder layers per iteration of the step's layer loop (a `lax.scan` over the stacked
    weights): 1 keeps one layer's code, compiled once; a value >= the layers on a device unrolls
    them all (longer compiles, no per-layer slicing of the stacked weights at run time: on an H200
    an 8B decode of one 8K request took 8.2 ms a token unrolled vs 21.1 ms scanned, README). On a
    CPU with spp=1 the weights are per-layer buffers either way (`sharding.unstack_layers`)."""
    num_pages: int | None = None
    """KV-cache pages per kvp group (the KV page budget); default: from kv_cache_memory_gb, else 1024."""
    max_tokens_per_kvp_group: int | None = None
    """KV positions of one request a kvp group holds before the next group onboards (progressive
    KVP: group g holds positions [g*M, (g+1)*M)); a multiple of page_size; default: a group's whole
    page pool (or the mesh preset's value)."""
    kv_cache_memory_gb: float | None = None
    """Device memory for the KV cache per device, in GB; used when num_pages is not given."""
    max_model_len: int | None = None
    """Longest prompt + output a request may have; default: the model's max_position_embeddings."""
    min_token_bucket: int = 16
    """Smallest padded token count compiled (shape buckets are powers of two up to the token budget)."""
    min_seq_bucket: int = 4
    """Smallest padded sequence count compiled."""
    min_page_bucket: int = 8
    """Smallest padded page-table width compiled."""
    compilation_cache_dir: str | None = "~/.cache/medha_jax/xla"
    """Persistent XLA compilation cache, so a restart with the same model and shapes skips compiling; None disables."""
    warmup: bool = True
    """Compile shape buckets at start-up (with background_compile: the one every batch fits; else
    all of them, with a progress bar). Without it every new shape compiles when first needed."""
    background_compile: bool = True
    """Start serving after compiling only the bucket every batch fits; a background thread then
    compiles the cheapest other buckets (64) and any bucket a batch needs; until its own bucket is
    ready a batch runs padded in the cheapest compiled bucket that holds it. Off: every bucket
    before serving (benchmarks: no compiles during a timed run)."""
    enable_prefix_caching: bool = True
    """Keep full KV pages indexed by their tokens (and everything before them): a request whose
    prompt starts like an earlier one's reuses those pages and prefills only the rest. Freed
    cached pages stay reusable until memory is needed (least recently freed evicted first)."""
    swap_space_gb: float | None = None
    """Host memory, in GB, for KV pages evicted from the device (swap space): an evicted cached
    page is copied there, and a request that needs it again (a preempted one resuming, a repeated
    prefix) gets it copied back instead of recomputed; least recently used pages are dropped when
    it is full. Needs prefix caching; 0 turns it off. Default: 4 with prefix caching on a single
    process, else 0."""
    async_scheduling: bool = True
    """Form and launch step n+1 while step n runs on the device (spp == 1): scheduling, packing and
    detokenizing overlap the device, and the token step n samples feeds step n+1 on the device.
    Greedy and seeded outputs are the same either way; a request stopped by a token (EOS, a stop
    string) costs one wasted decode slot. Off: each step waits for the previous one's tokens."""
    late_binding: bool = True
    """Asynchronous scheduling while serving (not in batch mode): when the step on the device is
    predicted to take LATE_BIND_MIN_S or more, form the next one only shortly before it ends, so
    that a request arriving meanwhile is in it rather than in the one after (a first token one
    iteration sooner: under a long prompt's 0.15 s chunks on the CPU that is a third of a short
    request's wait). The device idles only where a step ends sooner than LATE_BIND_FRACTION of its
    prediction. Off: the next step is formed as soon as the previous one is launched."""
    profile_dir: str = "~/.cache/medha_jax/profiles"
    """Where runtime-predictor profiles live (written by `python -m medha_jax.profile`). A policy that
    needs one and finds none measures a quick profile at start-up and saves it here."""
    seed: int = 0
    """Seed for the demo model's weights and for requests that give no seed of their own."""
    multihost: bool = False
    """Initialise jax.distributed before building the mesh (one process per host); process 0
    schedules and serves, the others replay its device steps."""
    coordinator_address: str | None = None
    """Multi-host: HOST:PORT of process 0's coordination service (default: from the cluster environment)."""
    num_processes: int | None = None
    """Multi-host: number of processes (default: from the cluster environment)."""
    process_id: int | None = None
    """Multi-host: this process's index, 0 = the leader (default: from the cluster environment)."""

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {KV_CACHE_DTYPES}, got {self.kv_cache_dtype!r}")
        if self.load_format not in LOAD_FORMATS:
            raise ValueError(f"load_format must be one of {LOAD_FORMATS}, got {self.load_format!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got {self.attention_backend!r}")
        if self.num_devices is not None and self.num_devices < 1:
            raise ValueError(f"num_devices must be >= 1, got {self.num_devices}")
        if self.page_size < 1 or self.page_size & (self.page_size - 1):
            raise ValueError(f"page_size must be a power of two >= 1, got {self.page_size}")
        if self.layer_unroll < 1:
            raise ValueError(f"layer_unroll must be >= 1, got {self.layer_unroll}")
        if self.num_pages is not None and self.num_pages < 2:
            raise ValueError(f"num_pages must be >= 2, got {self.num_pages}")
        if self.kv_cache_memory_gb is not None and self.kv_cache_memory_gb <= 0:
            raise ValueError(f"kv_cache_memory_gb must be > 0, got {self.kv_cache_memory_gb}")
        if self.swap_space_gb is not None:
            if not self.swap_space_gb >= 0 or self.swap_space_gb == float("inf"):
                raise ValueError(f"swap_space_gb must be a finite number >= 0, got {self.swap_space_gb}")
            if self.swap_space_gb > 0 and not self.enable_prefix_caching:
                raise ValueError("swap_space_gb > 0 needs enable_prefix_caching: the host tier keeps the pages the "
                                 "prefix cache evicts")
            if self.swap_space_gb > 0 and self.multihost:
                raise ValueError("swap_space_gb > 0 is not supported on a multi-host mesh (set it to 0)")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"max_model_len must be >= 2, got {self.max_model_len}")
        if self.max_tokens_per_kvp_group is not None and (
                self.max_tokens_per_kvp_group < self.page_size or self.max_tokens_per_kvp_group % self.page_size):
            raise ValueError(f"max_tokens_per_kvp_group must be a positive multiple of page_size={self.page_size}, "
                             f"got {self.max_tokens_per_kvp_group}")
        if self.num_processes is not None and self.num_processes < 1:
            raise ValueError(f"num_processes must be >= 1, got {self.num_processes}")
        if self.process_id is not None and not (
                0 <= self.process_id < (self.num_processes if self.num_processes is not None else self.process_id + 1)):
            raise ValueError(f"process_id must be in [0, num_processes), got {self.process_id}")
        if not self.multihost and (self.coordinator_address or self.num_processes or self.process_id):
            raise ValueError("coordinator_address / num_processes / process_id need multihost=True")
        for name in ("min_token_bucket", "min_seq_bucket", "min_page_bucket"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

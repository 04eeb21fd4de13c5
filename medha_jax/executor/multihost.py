"""Multi-host: one process per host forms one mesh; process 0 decides, every process executes.

JAX is multi-controller: every process must launch the same compiled programs, in the same
order, with the same host inputs. Design decision: only process 0 (the leader) runs the front
ends, the scheduler and the KV page tables; it broadcasts each device operation of its executor
before running it, and the followers replay them. (The alternative, running the deterministic
scheduler on every process, would need every process to see the same request stream at the same
clock readings; a broadcast of the packed arrays is simpler and needs no clock agreement.)

    leader  Executor._send(op, arrays) -> Channel.send: header i32[2] (op, payload bytes), then the
            arrays as one .npz byte buffer padded to a power of two (few distinct shapes, so
            few compiles of the broadcast program)
    follower follow(executor): receive -> "run" -> executor.run_arrays(arrays) (a failure is
                                          logged: the leader fails the same step and follows
                                          with "reset_pipeline" / "reset_kv")
                                          "reset_kv" / "reset_pipeline" -> same call
                                          "shutdown" -> return

Both directions use `jax.experimental.multihost_utils.broadcast_one_to_all` (a psum over every
device of the mesh), so the transport is JAX's own collectives (gloo on CPUs, NCCL on GPUs).
`initialize(config)` starts `jax.distributed` (with gloo CPU collectives) before any device use.
"""

from __future__ import annotations

import io
import logging

import numpy as np

log = logging.getLogger(__name__)

OPS = ("run", "reset_kv", "reset_pipeline", "shutdown")
_MIN_PAYLOAD = 4096


def initialize(config) -> None:
    """`jax.distributed.initialize` from an EngineConfig (multihost=True); idempotent."""
    import jax

    if jax.distributed.is_initialized():
        return
    # CPU processes need a collectives implementation to form one mesh; GPUs ignore this.
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address=config.coordinator_address,
                               num_processes=config.num_processes, process_id=config.process_id)
    log.info("jax.distributed: process %d of %d, %d local / %d global devices", jax.process_index(),
             jax.process_count(), jax.local_device_count(), jax.device_count())


def _bcast(x: np.ndarray) -> np.ndarray:
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.broadcast_one_to_all(x))


def _encode(arrays: dict[str, np.ndarray] | None) -> np.ndarray:
    if not arrays:
        return np.zeros(0, np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return np.frombuffer(buf.getvalue(), np.uint8)


def _decode(raw: np.ndarray) -> dict[str, np.ndarray]:
    if raw.size == 0:
        return {}
    with np.load(io.BytesIO(raw.tobytes()), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}


def _padded_size(n: int) -> int:
    size = _MIN_PAYLOAD
    while size < n:
        size *= 2
    return size


class Channel:
    """The leader's end: send one device operation to every follower."""

    def send(self, op: str, arrays: dict[str, np.ndarray] | None = None) -> None:
        raw = _encode(arrays)
        _bcast(np.array([OPS.index(op), raw.size], np.int32))
        if raw.size:
            words = np.zeros(_padded_size(raw.size) // 4, np.int32)  # int32: psum-safe on every backend
            words.view(np.uint8)[: raw.size] = raw
            _bcast(words)


def receive() -> tuple[str, dict[str, np.ndarray]]:
    """A follower's end: the next operation the leader sent."""
    op, n = (int(v) for v in _bcast(np.zeros(2, np.int32)))
    arrays = {}
    if n:
        words = _bcast(np.zeros(_padded_size(n) // 4, np.int32))
        arrays = _decode(words.view(np.uint8)[:n])
    return OPS[op], arrays


def follow(executor) -> int:
    """Replay the leader's device operations on `executor` until it shuts down; returns ticks run."""
    ticks = 0
    while True:
        op, arrays = receive()
        if op == "run":
            try:
                executor.run_arrays(arrays)
            except Exception:  # noqa: BLE001 - the leader fails the same step and sends the resets
                log.exception("step %d failed; waiting for the leader's resets", ticks)
            ticks += 1
        elif op == "reset_kv":
            executor.reset_kv_cache()
        elif op == "reset_pipeline":
            executor.reset_pipeline()
        else:
            log.info("leader shut down after %d ticks", ticks)
            return ticks

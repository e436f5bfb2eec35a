"""Several processes, one mesh: start JAX's own multi-process runtime (gloo on CPU, NCCL on GPU).

A script that calls ``jaxcoll.tools.distributed.initialize()`` before any other JAX work runs
unchanged in three places:

- under ``python -m jaxcoll.tools.launch`` (local processes, fake CPU devices): the launcher
  puts the coordinator's address, the process count and this process's id in the environment
  (``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``);
- under a cluster's launcher (SLURM ``srun``, Open MPI ``mpirun``, Kubernetes):
  ``jax.distributed.initialize()`` detects it;
- alone: one process, nothing to do.

After it, ``jax.devices()`` lists every process's devices (process 0's first), so a mesh over
them spans the processes and jaxcoll's ``ppermute`` calls cross them where ranks do. Under the
launcher it first moves native code's output (file descriptors 1 and 2: gloo's C++, XLA's logs)
to the launcher's pipes for it, so that what Python prints reaches the launcher in whole lines.
"""

from __future__ import annotations

import io
import logging
import os
import stat
import sys

import jax
import numpy as np
from jax.experimental import multihost_utils

# What python -m jaxcoll.tools.launch sets for each process it starts.
COORDINATOR = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES = "JAX_NUM_PROCESSES"
PROCESS_ID = "JAX_PROCESS_ID"
DEVICES_PER_PROCESS = "JAX_NUM_CPU_DEVICES"  # read by JAX itself (config jax_num_cpu_devices)
NATIVE_OUTPUT_FDS = "JAXCOLL_LAUNCH_NATIVE_OUTPUT_FDS"  # the pipes for native code's output


def transport() -> str:
    """Where this process's collectives run, the key of its calibration: ``"gloo"`` for CPU
    devices of several processes (JAX's CPU collectives cross processes over gloo), else JAX's
    default backend (``"cpu"``: fake devices of one process, whose ppermutes are memory
    copies; ``"gpu"``, ``"tpu"``)."""
    backend = jax.default_backend()
    return "gloo" if backend == "cpu" and jax.process_count() > 1 else backend


def _initialized() -> bool:
    return getattr(jax.distributed, "is_initialized", lambda: False)()


def initialize() -> int:
    """Join the other processes of this run (launcher, cluster or none); return the count."""
    _separate_native_output()
    if _initialized():
        return jax.process_count()
    launched = bool(os.environ.get(COORDINATOR) and os.environ.get(NUM_PROCESSES))
    try:
        if launched:
            jax.distributed.initialize(os.environ[COORDINATOR], _env_int(NUM_PROCESSES),
                                       _env_int(PROCESS_ID))
        else:  # SLURM, Open MPI, Kubernetes, Cloud TPU are detected by JAX itself
            jax.distributed.initialize()
    except ValueError as error:  # JAX found no cluster: a single process, nothing to join
        if launched or "coordinator_address" not in str(error):
            raise
        return 1
    except RuntimeError as error:  # JAX started already
        if launched or "must be called before" not in str(error):
            raise RuntimeError("jaxcoll.tools.distributed.initialize() must run before any other "
                               "JAX work (computations, jax.devices(), device_put)") from error
        return jax.process_count()
    return jax.process_count()


def _separate_native_output() -> None:
    """Under ``python -m jaxcoll.tools.launch``: file descriptors 1 and 2 (where native code writes)
    go to the launcher's pipes for native output, and ``sys.stdout``/``sys.stderr`` (and the
    logging handlers that hold them) to new descriptors of the pipes 1 and 2 were, which only
    Python writes to from now on. Once per process; without the launcher, nothing."""
    fds = os.environ.pop(NATIVE_OUTPUT_FDS, "")  # not for this process's own children
    try:
        native = [int(fd) for fd in fds.split(",")]
        if len(native) != 2 or not all(stat.S_ISFIFO(os.fstat(fd).st_mode) for fd in native):
            return
    except (ValueError, OSError):  # no launcher, or a variable inherited without its pipes
        return
    for fd, name, target in ((native[0], "stdout", 1), (native[1], "stderr", 2)):
        streams = {attr: getattr(sys, attr) for attr in (f"__{name}__", name)
                   if _writes_to(getattr(sys, attr), target)}
        for stream in streams.values():
            stream.flush()
        kept = os.dup(target)  # the pipe the launcher prefixes [rank k]
        os.dup2(fd, target)
        os.close(fd)
        if not streams:
            os.close(kept)
            continue
        new = _text_stream(kept, like=next(iter(streams.values())))
        for attr, stream in streams.items():
            setattr(sys, attr, new)
            _repoint_handlers(stream, new)


def _writes_to(stream, fd: int) -> bool:
    """Whether ``stream`` is a file object on descriptor ``fd``."""
    try:
        return stream is not None and stream.fileno() == fd
    except (AttributeError, ValueError, OSError, io.UnsupportedOperation):
        return False


def _text_stream(fd: int, like) -> io.TextIOWrapper:
    """A text stream on ``fd`` that encodes and buffers as ``like`` (unbuffered under
    PYTHONUNBUFFERED, which the launcher sets)."""
    unbuffered = not isinstance(getattr(like, "buffer", None), io.BufferedIOBase)
    raw = io.FileIO(fd, "w", closefd=True)
    return io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw),
                            encoding=getattr(like, "encoding", None) or "utf-8",
                            errors=getattr(like, "errors", None) or "backslashreplace",
                            line_buffering=bool(getattr(like, "line_buffering", False)),
                            write_through=unbuffered)


def _repoint_handlers(old, new) -> None:
    """Logging handlers made before (JAX makes one on sys.stderr at import) follow the move."""
    for ref in list(getattr(logging, "_handlerList", ())):
        handler = ref() if callable(ref) else None
        if isinstance(handler, logging.StreamHandler) and handler.stream is old:
            try:
                handler.setStream(new)
            except AttributeError:  # logging.lastResort: writes to whatever sys.stderr is
                pass


def _env_int(name: str) -> int:
    text = os.environ.get(name, "")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {text!r} "
                         f"(python -m jaxcoll.tools.launch sets it)") from None


def gather(values) -> np.ndarray:
    """(processes, ...): ``values`` from every process, on every process (alone: one row),
    bit for bit in their own dtype (JAX without x64 would make float64 float32: their bytes
    travel instead)."""
    values = np.asarray(values)
    if jax.process_count() == 1:
        return values[None]
    raw = np.ascontiguousarray(values).reshape(-1).view(np.uint8)  # (values.nbytes,)
    rows = np.asarray(multihost_utils.process_allgather(raw, tiled=False))  # (processes, nbytes)
    return np.ascontiguousarray(rows).view(values.dtype).reshape(-1, *values.shape)


def local_blocks(array) -> list[np.ndarray]:
    """The blocks of a (possibly multi-process) ``array`` this process holds, in shard order."""
    return [np.asarray(shard.data) for shard in array.addressable_shards]

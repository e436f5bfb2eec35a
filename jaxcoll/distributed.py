"""Several processes, one mesh: start JAX's own multi-process runtime (gloo on CPU, NCCL on GPU).

A script that calls ``jaxcoll.distributed.initialize()`` before any other JAX work runs
unchanged in three places:

- under ``python -m jaxcoll.launch`` (local processes, fake CPU devices): the launcher puts the
  coordinator's address, the process count and this process's id in the environment
  (``JAX_COORDINATOR_ADDRESS``, ``JAX_NUM_PROCESSES``, ``JAX_PROCESS_ID``);
- under a cluster's launcher (SLURM ``srun``, Open MPI ``mpirun``, Kubernetes):
  ``jax.distributed.initialize()`` detects it;
- alone: one process, nothing to do.

After it, ``jax.devices()`` lists every process's devices (process 0's first), so a mesh over
them spans the processes and jaxcoll's ``ppermute``s cross them where ranks do.
"""

from __future__ import annotations

import os

import jax
import numpy as np

# What python -m jaxcoll.launch sets for each process it starts.
COORDINATOR = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES = "JAX_NUM_PROCESSES"
PROCESS_ID = "JAX_PROCESS_ID"
DEVICES_PER_PROCESS = "JAX_NUM_CPU_DEVICES"  # read by JAX itself (config jax_num_cpu_devices)


def _initialized() -> bool:
    return getattr(jax.distributed, "is_initialized", lambda: False)()


def initialize() -> int:
    """Join the other processes of this run (launcher, cluster or none); return the count."""
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
            raise RuntimeError("jaxcoll.distributed.initialize() must run before any other "
                               "JAX work (computations, jax.devices(), device_put)") from error
        return jax.process_count()
    return jax.process_count()


def _env_int(name: str) -> int:
    text = os.environ.get(name, "")
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {text!r} "
                         f"(python -m jaxcoll.launch sets it)") from None


def gather(values) -> np.ndarray:
    """(processes, ...): ``values`` from every process, on every process (alone: one row)."""
    values = np.asarray(values)
    if jax.process_count() == 1:
        return values[None]
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(values, tiled=False))


def local_blocks(array) -> list[np.ndarray]:
    """The blocks of a (possibly multi-process) ``array`` this process holds, in shard order."""
    return [np.asarray(shard.data) for shard in array.addressable_shards]

"""Tutorial 12's failure demonstrations, each in processes of its own (a hang would stop the
notebook's kernel), and the plumbing the notebook uses to start them.

    python tutorials/_pipeline_demo.py cond          # one process, 4 fake devices
    python -m jaxcoll.tools.launch --nproc 2 --devices-per-proc 1 -- \
        python tutorials/_pipeline_demo.py order     # or: swapped, straggler

- ``cond``: a ``ppermute`` inside a ``lax.cond`` that only rank 0 takes; the other ranks never
  reach it. It prints ``RAN`` only if the program returns.
- ``order``: process 0 runs a psum then an all_gather, process 1 the same two in the other
  order. Each call has a watchdog: a collective not done after ``WATCHDOG`` seconds prints
  ``WATCHDOG`` and ends the process with code 3 (as NCCL users' watchdogs do, see the notebook).
- ``swapped``: two psums of the same shape and kind, process 1 running them in the other
  order, each call under the same watchdog; process 0 prints ``RESULT {json}`` if both ended.
- ``straggler``: process ``STRAGGLER`` sleeps ``SLEEP`` s before an allreduce, and every
  process times its own call. Process 0 prints ``RESULT {json}``.

Imported (by the notebook), it offers :func:`alone`, :func:`launch` and :func:`result`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
WATCHDOG = 3.0  # seconds a collective may take in ``order`` before its process gives up
SLEEP, STRAGGLER = 1.0, 1  # ``straggler``: who sleeps before the timed allreduce, and how long
COUNT = 4  # float32 values per rank


def _environment() -> dict:
    """The caller's environment without its JAX_* variables (a run sets its own)."""
    return {key: value for key, value in os.environ.items() if not key.startswith("JAX_")}


def alone(mode: str, xla_flags: str = "", timeout: float = 60) -> subprocess.CompletedProcess:
    """Run this script's ``mode`` as one process (its return code and output, text)."""
    env = _environment() | {"XLA_FLAGS": xla_flags}
    return subprocess.run([sys.executable, str(HERE), mode], capture_output=True, text=True,
                           timeout=timeout, env=env)


def launch(nproc: int, mode: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run this script's ``mode`` under ``python -m jaxcoll.tools.launch`` as ``nproc``
    processes of one device each, stopped after ``timeout`` seconds (exit code 124: only if
    something else hangs; a hang this script makes is ended by its own watchdog)."""
    command = [sys.executable, "-m", "jaxcoll.tools.launch", "--nproc", str(nproc),
               "--devices-per-proc", "1", "--timeout", str(timeout), "--grace", "1",
               "--", sys.executable, str(HERE), mode]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout + 30,
                          env=_environment())


def result(output: str) -> dict:
    """Process 0's ``RESULT`` line, parsed."""
    (line,) = [line for line in output.splitlines() if " RESULT " in line]
    return json.loads(line.split(" RESULT ", 1)[1])


def _cond():
    os.environ["JAX_PLATFORMS"] = "cpu"
    import jax

    jax.config.update("jax_num_cpu_devices", 4)
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()), ("pp",))

    def only_rank_0_sends(x):
        send = lambda v: lax.ppermute(v, "pp", [(0, 1)])  # noqa: E731
        return lax.cond(lax.axis_index("pp") == 0, send, lambda v: v, x)

    program = jax.jit(jax.shard_map(only_rank_0_sends, mesh=mesh, in_specs=P("pp"),
                                    out_specs=P("pp")))
    x = np.arange(4.0, dtype=np.float32)
    compiled = program.lower(x).compile()  # traced (the type check passed: both branches are
    print("TRACED", flush=True)            # varying) and compiled
    print("RAN", compiled(x).tolist(), flush=True)


def _programs(*names):
    import jax
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jaxcoll

    mesh = Mesh(np.array(jax.devices()), ("i",))
    n = mesh.size

    def program(f):
        return jax.jit(jax.shard_map(lambda rows: f(rows[0])[None], mesh=mesh,
                                     in_specs=P("i"), out_specs=P("i")))

    values = np.arange(n * COUNT, dtype=np.float32).reshape(n, COUNT)  # row r: rank r's x
    x = jax.make_array_from_callback(values.shape, NamedSharding(mesh, P("i")),
                                     lambda index: values[index])
    bodies = {"psum": lambda v: lax.psum(v, "i"), "psum of 10x": lambda v: lax.psum(10 * v, "i"),
              "all_gather": lambda v: lax.all_gather(v, "i").reshape(-1),
              "ring_allreduce": lambda v: jaxcoll.ring_allreduce(v, "i")}
    programs = {name: program(bodies[name]) for name in names}
    for run in programs.values():
        run.lower(x).compile()  # compiled before anything is timed or waited for
    return programs, x, values


def _mine(array) -> list:
    """This process's row of ``array`` (one device per process)."""
    import numpy as np

    return np.asarray(array.addressable_shards[0].data).ravel().tolist()


def _watched(name: str, run) -> object:
    """``run()`` (a collective's call), ended by the watchdog if it is not done in time."""
    import jax

    print(f"calling {name}", flush=True)
    watchdog = threading.Timer(WATCHDOG, lambda: (
        print(f"WATCHDOG: {name} not done after {WATCHDOG:g} s", flush=True), os._exit(3)))
    watchdog.start()
    out = jax.block_until_ready(run())
    watchdog.cancel()
    print(f"{name} finished", flush=True)
    return out


def _order():
    import jax

    programs, x, _ = _programs("psum", "all_gather")
    names = ["psum", "all_gather"] if jax.process_index() == 0 else ["all_gather", "psum"]
    for name in names:
        _watched(name, lambda name=name: programs[name](x))


def _swapped():
    import jax

    programs, x, values = _programs("psum", "psum of 10x")
    names = ["psum", "psum of 10x"][::-1 if jax.process_index() == 1 else 1]
    swapped = {name: _mine(_watched(name, lambda name=name: programs[name](x)))
               for name in names}
    if jax.process_index() == 0:
        print("RESULT " + json.dumps({"values": values.tolist(), "swapped": swapped}),
              flush=True)


def _straggler():
    import jax

    from jaxcoll.tools.distributed import gather

    programs, x, _ = _programs("ring_allreduce")
    allreduce = programs["ring_allreduce"]
    jax.block_until_ready(allreduce(x))  # every process here: they leave it about together
    if jax.process_index() == STRAGGLER:
        time.sleep(SLEEP)
    entered = time.time()  # the host's clock, the same in every process of this machine
    jax.block_until_ready(allreduce(x))
    left = time.time()
    entered, left = gather([entered, left]).T.tolist()  # (processes,) each
    if jax.process_index() == 0:
        print("RESULT " + json.dumps({"entered": entered, "left": left, "sleep": SLEEP,
                                      "straggler": STRAGGLER}), flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "cond":
        _cond()
    else:
        import jaxcoll.tools.distributed

        jaxcoll.tools.distributed.initialize()  # before any other JAX work
        {"order": _order, "swapped": _swapped, "straggler": _straggler}[mode]()

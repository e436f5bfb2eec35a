"""Tutorial 10's multi-process run, and the plumbing the notebook uses to start it.

Run as a script under the launcher, it is one process of the run:

    python -m jaxcoll.tools.launch --nproc 4 --devices-per-proc 1 -- \
        python tutorials/_across_processes_demo.py

Each process joins the others, builds one mesh of every process's devices, and runs the same
allreduce three ways (jaxcoll's ring, lax.psum, jaxcoll's auto) on integer-valued float32
inputs. Process 0 prints one line, ``RESULT {json}``: the mismatches (all processes' counts
added up), what each compiled program contains (its collectives and their names, the bytes of
each collective-permute, the trip counts of its loops), each process's first call of each
(compile included), the transport and what auto chose. Given a folder (the script's argument),
each process also records a profiler trace of ring and psum there (:func:`trace`).

Imported (by the notebook), it only offers :func:`launch`, :func:`result` and :func:`trace`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

COUNT = 100_000  # float32 values per rank: 400 kB
CALLS = 5  # calls of each program traced


def launch(nproc: int, *command: str, devices_per_proc: int = 1) -> str:
    """Run ``command`` as ``nproc`` processes under ``python -m jaxcoll.tools.launch``; their
    output, each line prefixed ``[rank k]``. The processes get their coordinates from the
    launcher, not from the caller's ``JAX_*`` variables, which are left out."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("JAX_")}
    done = subprocess.run([sys.executable, "-m", "jaxcoll.tools.launch", "--nproc", str(nproc),
                           "--devices-per-proc", str(devices_per_proc), "--timeout", "240",
                           "--", *command], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def result(nproc: int, traces: str = "") -> dict:
    """Launch this script on ``nproc`` one-device processes (recording their traces in the
    folder ``traces``, if given); process 0's RESULT, parsed."""
    script = [sys.executable, str(Path(__file__).resolve())]
    output = launch(nproc, *script, *([traces] if traces else []))
    (line,) = [line for line in output.splitlines() if " RESULT " in line]
    return json.loads(line.split(" RESULT ", 1)[1])


def trace(folder: str, programs: dict, x) -> None:
    """Record a trace of CALLS calls of each program in ``folder``/NAME/p{this process}."""
    import jax
    from jax.experimental import multihost_utils

    for name, run in programs.items():  # each compiled and run once already
        multihost_utils.sync_global_devices(name)  # a barrier: all done with the last one
        with jax.profiler.trace(f"{folder}/{name}/p{jax.process_index()}"):
            for _ in range(CALLS):
                run(x).block_until_ready()


def main():
    """One process of the run (see the module docstring)."""
    import jaxcoll.tools.distributed

    jaxcoll.tools.distributed.initialize()  # before any other JAX work: join the other processes

    import re
    import time

    import jax
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jaxcoll
    from jaxcoll.tools.distributed import gather, local_blocks

    axis = "i"
    mesh = Mesh(np.array(jax.devices()), (axis,))  # every process's devices, process 0's first
    n = mesh.size

    def program(allreduce):
        """jit(shard_map): row r of an (n, COUNT) array is rank r's x; every rank gets the sum."""
        return jax.jit(jax.shard_map(lambda rows: allreduce(rows[0])[None], mesh=mesh,
                                     in_specs=P(axis), out_specs=P(axis)))

    programs = {"ring": program(lambda x: jaxcoll.ring_allreduce(x, axis)),
                "psum": program(lambda x: lax.psum(x, axis)),
                "auto": program(lambda x: jaxcoll.allreduce(x, axis))}

    # Every process makes the same (n, COUNT) array and hands JAX the rows it holds.
    values = np.random.default_rng(0).integers(-8, 9, (n, COUNT)).astype(np.float32)
    x = jax.make_array_from_callback(values.shape, NamedSharding(mesh, P(axis)),
                                     lambda index: values[index])
    exact = values.sum(axis=0)  # integers: every order of the sum gives these bits

    wrong, first = {}, {}
    for name, run in programs.items():
        start = time.perf_counter()
        rows = local_blocks(run(x))  # this process's ranks' results, (1, COUNT) each
        first[name] = time.perf_counter() - start  # the first call compiles, then runs
        wrong[name] = sum(int(np.sum(row[0] != exact)) for row in rows)
    wrong = dict(zip(programs, gather(list(wrong.values())).sum(axis=0).tolist()))
    first = dict(zip(programs, gather(list(first.values())).T.tolist()))  # {name: per process}

    compiled = {}
    for name, run in programs.items():
        text = run.lower(x).compile().as_text()
        found = re.findall(r"%?([^\s%]+) = \S+ (all-reduce|collective-permute|all-gather|"
                           r"reduce-scatter|all-to-all)(?:-start)?\(", text)
        ops = [op for _, op in found]
        compiled[name] = {
            "ops": {op: ops.count(op) for op in sorted(set(ops))},
            "names": [op_name for op_name, _ in found],  # as a trace names their events
            "permute_bytes": [4 * int(np.prod([int(d) for d in dims.split(",") if d]))
                              for dims in re.findall(r"= f32\[([\d,]*)\]\S* collective-permute\(",
                                                     text)],
            "loop_trips": [int(t) for t in re.findall(r'"known_trip_count":\{"n":"(\d+)"', text)]}

    if len(sys.argv) > 1:
        trace(sys.argv[1], {name: programs[name] for name in ("ring", "psum")}, x)

    if jax.process_index() == 0:
        print("RESULT " + json.dumps({
            "processes": jax.process_count(), "ranks": n, "count": COUNT, "wrong": wrong,
            "compiled": compiled, "first_call_seconds": first, "calls_traced": CALLS,
            "transport": jaxcoll.tools.distributed.transport(),
            "collectives_implementation": os.environ.get("JAX_CPU_COLLECTIVES_IMPLEMENTATION"),
            "auto": jaxcoll.choose("allreduce", n, values[0].nbytes)}))


if __name__ == "__main__":
    main()

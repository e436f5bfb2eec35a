"""MSCCL XML algorithms (RCCL's library, say) beside jaxcoll's registered algorithms and
synthesize's, on the topology they were written for (not a test: the files are not part of
this project).

    python bench/msccl_library.py DIR [--run] [--markdown]

For every ``*.xml`` in DIR: load it by the runtimes' rules (jaxcoll.ir.msccl), verify it, and
price it with jaxcoll.simulate on N fully connected MI300X GPUs (jaxcoll.analysis.systems.mi300x:
every transfer of a round at once, as one MSCCL kernel runs them) at the largest size the file is
chosen for (its maxBytes; 1 MiB where it has none), beside the fastest registered jaxcoll
algorithm and synthesize's schedule there (allreduce, allgather, reduce_scatter) for the same
primitive, ranks and size. ``--run``: files of at most 8 GPUs also run on 8 fake CPU devices,
equal to lax on integer-valued inputs. Files the runtimes would refuse are listed with why.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--run", action="store_true", help="run files of <= 8 GPUs, vs lax")
    parser.add_argument("--markdown", action="store_true", help="one Markdown table")
    parser.add_argument("--assume", default="",
                        help="values for <algo> attributes a file lacks, e.g. "
                             "outofplace=0,minBytes=0,maxBytes=0 (msccl-tools' files)")
    args = parser.parse_args(argv)
    assume = dict(item.split("=") for item in args.assume.split(",") if item)
    os.environ.setdefault("JAXCOLL_CALIBRATE", "0")
    import jax

    jax.config.update("jax_num_cpu_devices", 8)
    import jaxcoll
    from jaxcoll.ir import msccl
    from jaxcoll.analysis import systems
    from jaxcoll.tools.console import format_size
    from jaxcoll.analysis.model import ranking
    from jaxcoll.ir.schedules import ScheduleError
    from jaxcoll.analysis.synthesize import SYNTHESIZABLE, synthesize

    rows, refused = [], []
    for path in sorted(args.folder.glob("*.xml")):
        started = time.perf_counter()
        try:
            program = msccl.parse(path, assume)
            schedule = msccl.load(path, assume=assume)
            jaxcoll.verify(schedule)
        except ScheduleError as error:
            refused.append((path.name, str(error)))
            continue
        n, primitive = program.ngpus, schedule.collective
        nbytes = program.max_bytes or 1 << 20
        topology = systems.mi300x(n)
        seconds = jaxcoll.simulate(schedule, nbytes, topology).seconds
        best, _ = ranking(primitive, n, nbytes, topology=topology)[0]
        registered = jaxcoll.simulate(jaxcoll.schedule(primitive, best, n), nbytes,
                                      topology).seconds
        searched = (synthesize(primitive, topology, nbytes, candidates=12).seconds
                    if primitive in SYNTHESIZABLE else float("nan"))
        ran = _run(schedule) if args.run and n <= 8 else ""
        rows.append((path.name, program.coll, n, format_size(nbytes),
                     "in" if schedule.in_place else "out", schedule.n_rounds,
                     seconds * 1e6, best, registered * 1e6, searched * 1e6, ran,
                     time.perf_counter() - started))
    header = ("file", "coll", "GPUs", "size", "place", "rounds", "file µs", "best registered",
              "its µs", "synthesized µs", "vs lax", "load+price s")
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        for row in rows:
            print("| " + " | ".join(_cell(v) for v in row) + " |")
    else:
        for row in rows:
            print("  ".join(_cell(v) for v in row))
    for name, why in refused:
        print(f"refused: {name}: {why}")
    print(f"{len(rows)} loaded and verified, {len(refused)} refused; jax {jax.__version__}")
    return 0


def _cell(value) -> str:
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def _run(schedule) -> str:
    """"equal" if the schedule's collective equals lax's on small integers, else why not."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    from jaxcoll.tools.check import SCATTERING, call_collective

    n, primitive = schedule.n_ranks, schedule.collective
    count = 2 * n * 3 if primitive in SCATTERING else 7
    x = jnp.asarray(np.random.default_rng(0).integers(-8, 9, (n, count)), jnp.float32)
    mesh = Mesh(np.array(jax.devices()[:n]), ("i",))

    def body(b):
        return (call_collective(primitive, schedule, b[0], "i")[None],
                call_collective(primitive, "xla", b[0], "i")[None])
    ours, theirs = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"),
                                         out_specs=P("i")))(x)
    return "equal" if np.array_equal(ours, theirs) else "DIFFERENT"


if __name__ == "__main__":
    sys.exit(main())

"""How the schedule tools scale with the rank count: building a registered schedule, its
``cost``, ``simulate`` on a switch and ``verify``, each timed, with the process' peak memory
(no JAX devices: plain Python and numpy).

    python bench/schedule_scale.py                     # n = 1024 and 4096: a table (minutes)
    python bench/schedule_scale.py --ns 4096 --primitives allreduce
    python bench/schedule_scale.py --priced --ns 32768 --primitives allreduce

``--priced``: at datacenter scale, on ``systems.dgx("h100", n / 8)`` (n / 8 nodes of 8 GPUs),
each schedule built (``hierarchical`` on (n / 8, 8), and on three levels (n / 64, 8, 8)),
then a 256 MiB allreduce priced both ways: lock-step (jaxcoll's executor) and pipelined (NCCL's
runtime, 8 channels), and NCCL's own choice (``nccl.predict`` on ``systems.cluster``): the
seconds of each step and the peak memory; a row over 10 s or 2 GB is marked, and one the
pipelined engine refuses (past its limits) says why in its last column, with bounds on its
pipelined price from its phases priced apart where they can be
(``jaxcoll.analysis.topology.pipelined_bounds``).

Each (algorithm, n) runs in a process of its own, so the peak memory is its own; rooted
algorithms run with root 0.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time


def measure(primitive: str, algorithm: str, n: int) -> dict:
    """Seconds of each step, and the peak resident memory in GB, of one schedule on n ranks."""
    import jaxcoll
    from jaxcoll.ir.families import build_schedule
    from jaxcoll.analysis.topology import switch

    began = time.perf_counter()
    schedule = build_schedule(primitive, algorithm, n)
    built = time.perf_counter()
    jaxcoll.cost(schedule, 1 << 24, alpha=1e-6, beta=1e-9)
    costed = time.perf_counter()
    jaxcoll.simulate(schedule, 1 << 24, switch(n, alpha=1e-6, beta=1e-9))
    simulated = time.perf_counter()
    jaxcoll.verify(schedule)
    verified = time.perf_counter()
    return dict(primitive=primitive, algorithm=algorithm, n=n, build=built - began,
                cost=costed - built, simulate=simulated - costed, verify=verified - simulated,
                peak_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6)


def priced(primitive: str, algorithm: str, n: int) -> dict:
    """Seconds to build ``algorithm`` at n ranks and price 256 MiB on n / 8 DGX H100 nodes
    lock-step and pipelined (8 channels, rooted ones 1), the predictions, and the peak GB.
    ``algorithm`` "hierarchical:3" is hierarchical on three levels."""
    import jaxcoll
    from jaxcoll.analysis import nccl
    from jaxcoll.analysis.systems import cluster, dgx
    from jaxcoll.analysis.topology import pipelined_bounds
    from jaxcoll.ir.families import SCHEDULES, build_schedule
    from jaxcoll.ir.records import RECORDS

    nbytes, began = 256 << 20, time.perf_counter()
    if algorithm == "nccl":
        predicted = nccl.predict(primitive, nbytes, cluster("h100", n // 8))
        done = time.perf_counter()
        return dict(primitive=primitive, algorithm=f"nccl ({predicted.algorithm}, "
                    f"{predicted.protocol})", n=n, build=0.0, lockstep=0.0,
                    pipelined=done - began, lockstep_ms=None,
                    pipelined_ms=predicted.seconds * 1e3, peak_gb=_peak_gb())
    name, _, levels = algorithm.partition(":")
    shape = ((n // 64, 8, 8) if levels == "3" else (n // 8, 8)) if (
        SCHEDULES[primitive][name].two_level) else n
    schedule = build_schedule(primitive, name, shape)
    built = time.perf_counter()
    topology = dgx("h100", n // 8)
    lockstep = jaxcoll.simulate(schedule, nbytes, topology)
    stepped = time.perf_counter()
    channels = 1 if RECORDS[primitive].rooted else 8
    try:
        pipelined_ms = jaxcoll.simulate(schedule, nbytes, topology, runtime="pipelined",
                                        channels=channels).seconds * 1e3
        refused = None
    except ValueError as error:  # past the pipelined engine's limits: said, not hidden
        pipelined_ms, refused = None, str(error)
    bounds = None
    if refused is not None:  # bracketed from its phases priced apart, where they can be
        try:
            bounds = [b * 1e3 for b in pipelined_bounds(schedule, nbytes, topology,
                                                       channels=channels)]
        except ValueError:
            pass
    done = time.perf_counter()
    return dict(primitive=primitive, algorithm=algorithm, n=n, build=built - began,
                lockstep=stepped - built, pipelined=done - stepped,
                lockstep_ms=lockstep.seconds * 1e3, pipelined_ms=pipelined_ms,
                refused=refused, bounds_ms=bounds, peak_gb=_peak_gb())


def _peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def _priced_table(primitives: list[str], ns: list[int]) -> None:
    """--priced: one process per (algorithm, n), a row each as it ends."""
    from jaxcoll.ir.families import SCHEDULES

    print("| primitive | algorithm | n | build s | lock-step s | pipelined s | all s | "
          "peak GB | lock-step ms | pipelined ms |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for primitive in primitives:
        names = list(SCHEDULES[primitive]) + ["nccl"] * (primitive in (
            "allreduce", "allgather", "reduce_scatter", "broadcast", "reduce", "alltoall"))
        names += ["hierarchical:3"] * ("hierarchical" in SCHEDULES[primitive])
        for algorithm in names:
            for n in ns:
                out = subprocess.run([sys.executable, __file__, "--one-priced", primitive,
                                      algorithm, str(n)], capture_output=True, text=True)
                if out.returncode:
                    why = (out.stderr.strip().splitlines() or ["?"])[-1][:120]
                    print(f"| {primitive} | {algorithm} | {n} | failed: {why} |||||||",
                          flush=True)
                    continue
                r = json.loads(out.stdout.splitlines()[-1])
                steps = [r[k] for k in ("build", "lockstep", "pipelined")]
                over = " **over**" if sum(steps) > 10 or r["peak_gb"] > 2 else ""
                ms = [("" if r[k] is None else f"{r[k]:.2f}")
                      for k in ("lockstep_ms", "pipelined_ms")]
                if r.get("refused"):
                    ms[1] = "refused: " + r["refused"].split(": ", 1)[-1][:90] + "..." + (
                        "" if r["bounds_ms"] is None else
                        " phases apart: {:.2f} to {:.2f}".format(*r["bounds_ms"]))
                print(f"| {primitive} | {r['algorithm']} | {n} | "
                      + " | ".join(f"{s:.2f}" for s in steps)
                      + f" | {sum(steps):.1f}{over} | {r['peak_gb']:.2f} | {ms[0]} | {ms[1]} |",
                      flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns", default="1024,4096")
    parser.add_argument("--primitives", default="all")
    parser.add_argument("--priced", action="store_true",
                        help="build and price both ways on DGX H100 nodes (module docstring)")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # a child: primitive alg n
    parser.add_argument("--one-priced", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        primitive, algorithm, n = args.one
        print(json.dumps(measure(primitive, algorithm, int(n))))
        return 0
    if args.one_priced:
        primitive, algorithm, n = args.one_priced
        print(json.dumps(priced(primitive, algorithm, int(n))))
        return 0
    from jaxcoll.ir.families import SCHEDULES, two_level

    primitives = list(SCHEDULES) if args.primitives == "all" else args.primitives.split(",")
    ns = [int(n) for n in args.ns.split(",")]
    if args.priced:
        _priced_table(primitives, ns)
        return 0
    print("| primitive | algorithm | n | build s | cost s | simulate s | verify s | "
          "all s | peak GB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for primitive in primitives:
        for algorithm in SCHEDULES[primitive]:
            if two_level(primitive, algorithm):
                continue
            for n in ns:
                out = subprocess.run([sys.executable, __file__, "--one", primitive, algorithm,
                                      str(n)], check=True, capture_output=True, text=True)
                r = json.loads(out.stdout.splitlines()[-1])
                steps = [r[k] for k in ("build", "cost", "simulate", "verify")]
                print(f"| {primitive} | {algorithm} | {n} | "
                      + " | ".join(f"{s:.2f}" for s in steps)
                      + f" | {sum(steps):.1f} | {r['peak_gb']:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

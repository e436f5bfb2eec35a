"""How the schedule tools scale with the rank count: building a registered schedule, its
``cost``, ``simulate`` on a switch and ``verify``, each timed, with the process' peak memory
(no JAX devices: plain Python and numpy).

    python bench/schedule_scale.py                     # n = 1024 and 4096: a table (minutes)
    python bench/schedule_scale.py --ns 4096 --primitives allreduce

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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns", default="1024,4096")
    parser.add_argument("--primitives", default="all")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)  # a child: primitive alg n
    args = parser.parse_args(argv)
    if args.one:
        primitive, algorithm, n = args.one
        print(json.dumps(measure(primitive, algorithm, int(n))))
        return 0
    from jaxcoll.ir.families import SCHEDULES, two_level

    primitives = list(SCHEDULES) if args.primitives == "all" else args.primitives.split(",")
    ns = [int(n) for n in args.ns.split(",")]
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

"""Scale on paper: predicted allreduce busbw against the rank count, every algorithm.

    python bench/scale.py [--gpu h100] [--size 256MiB] [--max-ranks 4096] [--out bench]

On DGX-like nodes of 8 GPUs (jaxcoll/analysis/systems.py: NVSwitch inside a node, 8 NICs per node,
documented link parameters), n = 8, 16, ... --max-ranks, --size bytes per rank: each allreduce
algorithm's schedule priced by jaxcoll.simulate (a round's transfers at once, shared links
split), busbw = 2(n-1)/n x size / time as nccl-tests reports it. Two-level ``hierarchical``
runs on (nodes, 8). Schedules whose transfers grow as n² (the rings) hold millions of
Python objects at thousands of ranks: a curve stops where its schedule would pass
--max-transfers (estimated from n = 64 and 128). Writes scale.json and scale.png (the
assumptions printed on the figure) and prints the table.
"""

import argparse
import json
import math
import sys
import time
from pathlib import Path

from jaxcoll.tools.console import parse_size
from jaxcoll.ir.families import SCHEDULES, build_schedule
from jaxcoll.analysis.model import bounds, schedule_for
from jaxcoll.analysis.systems import dgx
from jaxcoll.analysis.topology import simulate

GPUS_PER_NODE = 8


def transfers(schedule) -> int:
    return sum(len(r) for r in schedule.rounds)


def largest_n(algorithm: str, limit: int) -> float:
    """The rank count at which ``algorithm``'s schedule would hold ``limit`` transfers."""
    entry = SCHEDULES["allreduce"][algorithm]
    if entry.two_level:
        return math.inf
    small, large = (transfers(build_schedule("allreduce", algorithm, n)) for n in (64, 128))
    growth = math.log2(large / small)  # transfers ~ n ** growth
    return 128 * (limit / large) ** (1 / growth) if growth > 0 else math.inf


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100", choices=("a100", "h100"))
    parser.add_argument("--size", default="256MiB", help="bytes per rank")
    parser.add_argument("--max-ranks", type=int, default=4096)
    parser.add_argument("--max-transfers", type=int, default=9_000_000)
    parser.add_argument("--out", default=str(Path(__file__).parent))
    args = parser.parse_args(argv)
    nbytes = parse_size(args.size)
    ns = [GPUS_PER_NODE << k for k in range(20) if GPUS_PER_NODE << k <= args.max_ranks]
    names = sorted(SCHEDULES["allreduce"])
    reach = {a: largest_n(a, args.max_transfers) for a in names}
    curves = {a: {} for a in names}
    bound = {}
    for step, n in enumerate(ns):
        topology = dgx(args.gpu, n // GPUS_PER_NODE)
        factor = 2 * (n - 1) / n
        bound[n] = factor * nbytes / bounds("allreduce", n, nbytes, topology=topology).seconds / 1e9
        for a in names:
            if n > reach[a]:
                continue
            start = time.perf_counter()
            schedule = schedule_for("allreduce", a, n, nbytes, topology=topology)
            seconds = simulate(schedule, nbytes, topology).seconds
            build_schedule.cache_clear()  # a ring at 2048 ranks is 8 million Transfer objects
            curves[a][n] = factor * nbytes / seconds / 1e9
            print(f"[{step + 1}/{len(ns)}] n={n} {a}: {curves[a][n]:.1f} GB/s "
                  f"({time.perf_counter() - start:.1f} s)", file=sys.stderr, flush=True)
    assumptions = dgx(args.gpu, 2).assumptions.replace("2 nodes", "n/8 nodes")
    out = Path(args.out)
    (out / "scale.json").write_text(json.dumps(dict(
        gpu=args.gpu, bytes=nbytes, assumptions=assumptions, bound=bound,
        busbw={a: c for a, c in curves.items()}), indent=1) + "\n")
    print(f"predicted allreduce busbw (GB/s), {nbytes} B per rank; {assumptions}")
    print("| n | " + " | ".join(names) + " | bound |")
    print("|---" * (len(names) + 2) + "|")
    for n in ns:
        cells = [f"{curves[a][n]:.1f}" if n in curves[a] else "" for a in names]
        print(f"| {n} | " + " | ".join(cells) + f" | {bound[n]:.1f} |")
    plot(curves, bound, nbytes, assumptions, out / "scale.png")
    return 0


def plot(curves, bound, nbytes, assumptions, path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for name, curve in curves.items():
        if curve:
            ax.plot(list(curve), list(curve.values()), marker="o", label=name)
    ax.plot(list(bound), list(bound.values()), "k--", label="bandwidth + latency bound")
    ax.set(xscale="log", yscale="log", xlabel="ranks n (GPUs)", ylabel="predicted busbw (GB/s)",
           title=f"allreduce, {nbytes / 2**20:.0f} MiB per rank, on paper (jaxcoll.simulate)")
    ax.set_xticks(list(bound), [str(n) for n in bound])
    ax.legend(fontsize=8, ncol=2)
    fig.text(0.01, 0.01, "Assumptions: " + assumptions + ". A round's transfers at once; "
             "rounds in lock-step; no compute, no congestion beyond the NICs.", fontsize=7,
             wrap=True)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

"""Synthesized vs best hand-written vs bound, on paper, on the topology presets.

    python bench/synthesis.py [--candidates 48] [--large-candidates 16]

For allgather, reduce_scatter and allreduce at 64 KiB and 64 MiB per rank, on a switch of 8,
a ring of 8, a 4x4 torus, and 2x4 and 4x8 nodes with one NIC per GPU (rail-optimised):
``jaxcoll.synthesize`` (``--candidates`` policies searched; ``--large-candidates`` on the
32 ranks), the best registered algorithm (``ranking`` on the topology, ``hierarchical``
included on nodes and tori) and the lower bound (``bounds``), all priced by ``simulate``. Prints the
bench/MODEL.md table (markdown) and the seconds it took. No JAX: the search is numpy only.
"""

import argparse
import sys
import time

from jaxcoll.analysis import synthesize
from jaxcoll.analysis.topology import nodes, ring, switch, torus

# (α s, β s/B): H100-like, as jaxcoll.analysis.systems
NVLINK, NIC = (3e-6, 1 / 370e9), (1e-5, 1 / 50e9)
ICI = dict(alpha=1e-6, beta=1 / 45e9)  # a TPU-like torus link
PRESETS = (
    switch(8, alpha=5e-6, beta=1 / 370e9),
    ring(8, **ICI),
    torus(4, 4, **ICI),
    nodes(2, 4, nvlink=NVLINK, nic=NIC),
    nodes(4, 8, nvlink=NVLINK, nic=NIC),
)
PRIMITIVES = ("allgather", "reduce_scatter", "allreduce")
SIZES = (64 << 10, 64 << 20)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=48)
    parser.add_argument("--large-candidates", type=int, default=16,
                        help="policies searched on the 32-rank preset")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    print("| topology | collective | bytes per rank | searched µs | best registered µs | "
          "search / registered | bound µs | result / bound | winning policy |")
    print("|---|---|---|---|---|---|---|---|---|")
    for topology in PRESETS:
        candidates = args.candidates if topology.n <= 16 else args.large_candidates
        for primitive in PRIMITIVES:
            for nbytes in SIZES:
                found = synthesize(primitive, topology, nbytes, candidates=candidates)
                print(row(topology.name, primitive, nbytes, found), flush=True)
    print(f"\n{time.perf_counter() - start:.0f} s", file=sys.stderr)
    return 0


def row(name: str, primitive: str, nbytes: int, found) -> str:
    """One markdown row: the search's own best (bold where it beats every registered one)."""
    ratio = found.searched_seconds / found.registered_seconds
    searched = f"{found.searched_seconds * 1e6:.1f}"
    if ratio < 1 - 1e-9:
        searched = f"**{searched}**"
    policy = found.origin.split(": ", 1)[1] if found.origin.startswith("search") else (
        "(registered kept)")
    return (f"| {name} | {primitive} | {_size(nbytes)} | {searched} | "
            f"{found.best_registered} {found.registered_seconds * 1e6:.1f} | {ratio:.2f} | "
            f"{found.bound.seconds * 1e6:.1f} | {found.gap:.2f} | {policy} |")


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"


if __name__ == "__main__":
    sys.exit(main())

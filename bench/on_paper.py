"""jaxcoll against NCCL on paper: allreduce busbw from 8 to 32,768 H100s, three ways.

    python bench/on_paper.py [--ns 8,64,512,4096,32768] [--size 256MiB] [--out bench]

On ``systems.cluster("h100", n / 8)`` (DGX H100 nodes: NVSwitch with NVLS inside, 8 NICs of
400 Gb/s each, NCCL's own latencies), for each n:

- **NCCL's choice**: ``nccl.predict("allreduce", size, topology)``, NCCL v2.28.9's tuner;
- **jaxcoll's schedules as NCCL would run them**: every registered allreduce schedule (and
  ``hierarchical`` on (n / 8, 8), the NVLS schedule on one node, the NVLS tree,
  ``nvls.tree_allreduce(n / 8, 8)``, on more) priced
  ``runtime="pipelined"`` in 8 channels, Simple protocol;
- **jaxcoll's schedules as jaxcoll runs them**: the same schedules lock-step in one channel
  (XLA's collective-permutes, round after round), what ``auto`` and ``explain`` price.

busbw = 2(n - 1)/n x size / time, as nccl-tests reports it. Prints a progress line per n,
then the markdown table bench/MODEL.md holds; writes on_paper.json and on_paper.png.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

GPUS_PER_NODE = 8


def busbw(n: int, nbytes: float, seconds: float) -> float:
    """GB/s, as nccl-tests counts an allreduce's bus bandwidth."""
    return 2 * (n - 1) / n * nbytes / seconds / 1e9 if seconds > 0 else float("inf")


def price(n: int, nbytes: int) -> dict:
    """{"nccl": (algorithm/protocol, busbw), "pipelined"/"lockstep": {algorithm: busbw}}."""
    import jaxcoll
    from jaxcoll.analysis import nccl
    from jaxcoll.analysis.systems import cluster
    from jaxcoll.ir.families import SCHEDULES, build_schedule, nvls

    topology = cluster("h100", n // GPUS_PER_NODE)
    predicted = nccl.predict("allreduce", nbytes, topology)
    out = {"nccl": (f"{predicted.algorithm}/{predicted.protocol}", predicted.busbw),
           "pipelined": {}, "lockstep": {}}
    schedules = {name: build_schedule("allreduce", name, (n // GPUS_PER_NODE, GPUS_PER_NODE)
                                      if entry.two_level else n)
                 for name, entry in SCHEDULES["allreduce"].items()
                 if not (entry.two_level and n == GPUS_PER_NODE)}
    if n == GPUS_PER_NODE:
        schedules["nvls"] = nvls.allreduce(n)
    else:  # NCCL's NVLS_TREE's shape: NVLS in each node, a double binary tree of nodes
        schedules["nvls_tree"] = nvls.tree_allreduce(n // GPUS_PER_NODE, GPUS_PER_NODE)
    for name, schedule in schedules.items():
        out["pipelined"][name] = busbw(n, nbytes, jaxcoll.simulate(
            schedule, nbytes, topology, runtime="pipelined", channels=8).seconds)
        out["lockstep"][name] = busbw(n, nbytes,
                                      jaxcoll.simulate(schedule, nbytes, topology).seconds)
    return out


def table(results: dict) -> str:
    """The markdown table: per n, NCCL's pick, the best jaxcoll schedule each way, and the
    ring, hierarchical and the NVLS tree both ways."""
    lines = ["| GPUs | NCCL's choice | best jaxcoll schedule, pipelined | the same, lock-step "
             "| best lock-step | ring pipelined / lock-step | hierarchical pipelined / "
             "lock-step | NVLS tree pipelined / lock-step |", "|---:|---|---|---|---|---|---|---|"]
    for n, r in sorted(results.items(), key=lambda item: int(item[0])):
        pick, nccl_bw = r["nccl"]
        best = max(r["pipelined"], key=r["pipelined"].get)
        stepped = max(r["lockstep"], key=r["lockstep"].get)

        def both(name):
            if name not in r["pipelined"]:
                return "–"
            return f"{r['pipelined'][name]:.1f} / {r['lockstep'][name]:.1f}"

        lines.append(f"| {int(n):,} | {pick} {nccl_bw:.1f} | {best} {r['pipelined'][best]:.1f} "
                     f"({r['pipelined'][best] / nccl_bw:.2f}x NCCL) | "
                     f"{r['lockstep'][best]:.1f} | {stepped} {r['lockstep'][stepped]:.1f} | "
                     f"{both('ring')} | {both('hierarchical')} | {both('nvls_tree')} |")
    return "\n".join(lines)


def plot(results: dict, path: Path, size: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ns = sorted(int(n) for n in results)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    ax.plot(ns, [results[str(n)]["nccl"][1] for n in ns], "k-o", linewidth=2.5,
            label="NCCL's choice (its model)")
    names = sorted({a for r in results.values() for a in r["pipelined"]})
    palette = plt.get_cmap("tab20")  # 20 colours: no two series share one
    for k, name in enumerate(names):
        colour = palette(2 * k % 20 + 2 * k // 20 % 2)
        have = [n for n in ns if name in results[str(n)]["pipelined"]]
        for runtime, style in (("pipelined", "-"), ("lockstep", ":")):
            ax.plot(have, [results[str(n)][runtime][name] for n in have], style, color=colour,
                    marker=".", label=f"{name} ({runtime})" if runtime == "pipelined" else None)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("GPUs (H100, 8 per node, 8 x 400 Gb/s NICs)")
    ax.set_ylabel("allreduce busbw, GB/s")
    ax.set_title(f"{size} allreduce on paper: solid pipelined in 8 channels (NCCL's runtime), "
                 "dotted lock-step (jaxcoll's executor)", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    from jaxcoll.tools.console import parse_size

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ns", default="8,64,512,4096,32768")
    parser.add_argument("--size", default="256MiB", help="bytes per rank")
    parser.add_argument("--out", default=str(Path(__file__).parent))
    args = parser.parse_args(argv)
    nbytes = parse_size(args.size)
    results = {}
    for n in (int(n) for n in args.ns.split(",")):
        began = time.perf_counter()
        results[str(n)] = price(n, nbytes)
        print(f"n = {n}: {time.perf_counter() - began:.1f} s", file=sys.stderr, flush=True)
    out = Path(args.out)
    (out / "on_paper.json").write_text(json.dumps(results, indent=1) + "\n")
    plot(results, out / "on_paper.png", args.size)
    print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

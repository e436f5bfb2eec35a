"""Measured vs predicted: every algorithm of four collectives over a size sweep.

    python bench/model.py [--max 64MiB] [--out bench]

On 8 fake CPU devices, float32, 64 B to --max bytes per device in powers of 4, for allreduce,
allgather, reduce_scatter and broadcast: each algorithm (and xla) timed in alternation
(medians), next to the cost model's prediction with the shipped calibration, twice: the
α-β-γ model alone (the calibration's .plain()) and with its per-algorithm factors (what auto
uses; measured by calibrate at 2 KiB, 128 KiB and 8 MiB, sizes this sweep does not time).
Writes model.json (every point), model.png (measured vs predicted) and prints the MODEL.md
tables: median relative error per algorithm, how often each model picks the measured-fastest
algorithm, auto / fastest per size, and auto / xla at 1 KiB.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

from jaxcoll.tools.bench import (Ranks, count_wrong, parse_size, time_alternating,
                           verifiable_input)

PRIMITIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max", default="64MiB", help="largest size per device")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--out", default=str(Path(__file__).parent))
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)

    import jaxcoll
    from jaxcoll.analysis.model import ranking, schedule_bytes

    n = args.devices
    ranks = Ranks(n, tuple(jax.devices()[:n]))
    sizes = [64 * 4**k for k in range(20) if 64 * 4**k <= parse_size(args.max)]
    cal = jaxcoll.calibration("cpu")
    points = []
    steps = len(PRIMITIVES) * len(sizes)
    for step, (primitive, size) in enumerate((p, s) for p in PRIMITIVES for s in sizes):
        print(f"[{step + 1}/{steps}] {primitive} {size} B", file=sys.stderr, flush=True)
        names = [a for a in jaxcoll.algorithms(primitive) if a != "auto"]
        x = verifiable_input(ranks, size)
        nbytes = schedule_bytes(primitive, x[0].nbytes, n)  # the buffer the schedule works on
        repeats = 9 if size <= (1 << 20) else 5
        programs = {a: ranks.program(primitive, a, 0) for a in names}
        wrong = count_wrong(programs, x)
        assert not any(wrong.values()), f"elements differing from xla: {wrong}"
        times = time_alternating(programs, x, repeats)
        predicted = {a: c.seconds for a, c in ranking(primitive, n, nbytes, cal)}
        plain = {a: c.seconds for a, c in ranking(primitive, n, nbytes, cal.plain())}
        for a in names:
            points.append(dict(primitive=primitive, algorithm=a, bytes=int(x[0].nbytes),
                               measured=statistics.median(times[a]),
                               predicted=predicted.get(a), predicted_plain=plain.get(a),
                               auto=jaxcoll.choose(primitive, n, nbytes, cal),
                               auto_plain=jaxcoll.choose(primitive, n, nbytes, cal.plain())))
    out = Path(args.out)
    (out / "model.json").write_text(json.dumps(dict(
        jax=jax.__version__, devices=n, calibration=cal.__dict__, points=points), indent=1))
    print(report(points))
    plot(points, out / "model.png")
    return 0


def report(points) -> str:
    """The MODEL.md tables."""
    from jaxcoll.ir.families import two_level

    lines = ["| algorithm | points | median relative error: α-β-γ alone | with its factors |",
             "|---|---|---|---|"]
    for primitive in PRIMITIVES:
        for algorithm in sorted({p["algorithm"] for p in points if p["primitive"] == primitive
                                 and p["predicted"] is not None}):
            mine = [p for p in points if (p["primitive"], p["algorithm"]) == (primitive,
                                                                              algorithm)]
            errors = [statistics.median(abs(p[key] - p["measured"]) / p["measured"]
                                        for p in mine)
                      for key in ("predicted_plain", "predicted")]
            lines.append(f"| {primitive} {algorithm} | {len(mine)} | {errors[0]:.0%} | "
                         f"{errors[1]:.0%} |")
    lines += ["", "| primitive | bytes | measured fastest | auto picks (plain model) | "
              "auto / fastest | auto / xla | (plain: picks, / fastest) |",
              "|---|---|---|---|---|---|---|"]
    hits = {"auto": 0, "auto_plain": 0}
    total = 0
    for primitive in PRIMITIVES:
        for size in sorted({p["bytes"] for p in points}):
            here = {p["algorithm"]: p for p in points
                    if p["primitive"] == primitive and p["bytes"] == size}
            # what auto chooses from: not xla, not the two-level ones (they need a 2-D axis)
            ours = {a: p["measured"] for a, p in here.items()
                    if a != "xla" and not two_level(primitive, a)}
            fastest = min(ours, key=ours.get)
            first = next(iter(here.values()))
            auto, plain = first["auto"], first["auto_plain"]
            total += 1
            for key in hits:
                hits[key] += first[key] == fastest
            lines.append(f"| {primitive} | {size} | {fastest} | {auto} | "
                         f"{ours[auto] / ours[fastest]:.2f} | "
                         f"{ours[auto] / here['xla']['measured']:.2f} | "
                         f"{plain}, {ours[plain] / ours[fastest]:.2f} |")
    lines += ["", f"auto (with the factors) picked the measured-fastest algorithm at "
              f"{hits['auto']} of {total} points; the plain α-β-γ model at "
              f"{hits['auto_plain']}."]
    return "\n".join(lines)


def plot(points, path) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(4.2 * len(PRIMITIVES), 4.2))
    axes = fig.subplots(1, len(PRIMITIVES))
    for ax, primitive in zip(axes, PRIMITIVES):
        mine = [p for p in points if p["primitive"] == primitive and p["predicted"] is not None]
        for algorithm in sorted({p["algorithm"] for p in mine}):
            pts = [p for p in mine if p["algorithm"] == algorithm]
            ax.loglog([p["predicted"] * 1e3 for p in pts], [p["measured"] * 1e3 for p in pts],
                      "o-", markersize=4, label=algorithm)
        low = min(min(p["predicted"], p["measured"]) for p in mine) * 1e3
        high = max(max(p["predicted"], p["measured"]) for p in mine) * 1e3
        ax.plot([low, high], [low, high], "k--", linewidth=0.8, label="measured = predicted")
        ax.set_title(f"{primitive}, 8 fake CPU devices", fontsize=10)
        ax.set_xlabel("predicted (ms)")
        ax.set_ylabel("measured (ms)")
        ax.legend(fontsize=7)
    fig.suptitle("α-β-γ model with per-algorithm factors (what auto uses) vs measurement, "
                 "64 B .. max per device (each line: small to large)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())

"""Baseline timings: each algorithm of a collective as a ratio to ``xla``, on fake CPU devices.

    python bench/baseline.py --op allreduce --sizes 16MiB
    python bench/baseline.py --op broadcast --sizes 1KiB,16MiB

Every program is compiled, checked and warmed up first; then the algorithms run in alternation (A
B C A B C ...) so that drift on a shared machine hits all alike, and medians are reported. Sizes
are bytes of float32 input per device. The nccl-tests style benchmark, with nccl-tests' size
conventions, busbw and more options, is ``python -m jaxcoll.tools.bench`` (bench/collectives.py);
this script shares its helpers.
"""

import argparse
import statistics
import sys

from jaxcoll.tools.bench import (Ranks, count_wrong, parse_size, time_alternating,
                           verifiable_input)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="allreduce")
    parser.add_argument("--sizes", default="16MiB", help="comma-separated, e.g. 1KiB,16MiB")
    parser.add_argument("--algorithms", default="all", help="comma-separated, or 'all'")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--root", type=int, default=0)
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)

    import jaxcoll

    n = args.devices
    names = jaxcoll.algorithms(args.op)[1:]  # without "auto"; "xla" first
    if args.algorithms != "all":
        names = ["xla"] + [a for a in args.algorithms.split(",") if a != "xla"]
    ranks = Ranks(n, tuple(jax.devices()[:n]))
    print(f"{args.op}, {n} fake CPU devices, float32, median of {args.repeats} (alternating), "
          f"jax {jax.__version__}")
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        x = verifiable_input(ranks, size)
        programs = {name: ranks.program(args.op, name, args.root) for name in names}
        wrong = count_wrong(programs, x)
        assert not any(wrong.values()), f"elements differing from xla: {wrong}"
        times = time_alternating(programs, x, args.repeats)
        xla = statistics.median(times["xla"])
        print(f"  {x[0].nbytes} bytes per device")
        for name in names:
            median = statistics.median(times[name])
            print(f"    {name:<22} {median * 1e3:9.3f} ms  (min {min(times[name]) * 1e3:.3f}, "
                  f"max {max(times[name]) * 1e3:.3f})   / xla = {median / xla:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

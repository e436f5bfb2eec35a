"""Baseline timings: each algorithm of a collective as a ratio to ``xla``, on fake CPU devices.

    python bench/baseline.py --op allreduce --sizes 16MiB
    python bench/baseline.py --op broadcast --sizes 1KiB,16MiB

Every program is compiled, checked and warmed up first; then the algorithms run in alternation
(A B C A B C ...) so that drift on a shared machine hits all alike, and medians are reported.
Sizes are bytes of float32 input per device. The full nccl-tests style benchmark is a later
issue; this is the baseline it starts from.
"""

import argparse
import statistics
import sys
import time

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text: str) -> int:
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * UNITS[unit])
    return int(text)


def program(op: str, algorithm: str, mesh, root: int = 0):
    """jit(shard_map) of one collective over all of ``mesh`` (axis "i"), input (n, count)."""
    import jax
    from jax.sharding import PartitionSpec as P

    from jaxcoll.check import call_collective

    return jax.jit(jax.shard_map(
        lambda b: call_collective(op, algorithm, b[0], "i", root)[None],
        mesh=mesh, in_specs=P("i"), out_specs=P("i")))


def verifiable_input(mesh, size: int):
    """(n, count) float32 small integers, ``size`` bytes per device (a multiple of 4n): every
    sum is exact in any order."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P

    n = mesh.size
    count = max(n, size // 4 // n * n)
    values = np.random.default_rng(0).integers(-8, 9, (n, count))
    return jax.device_put(jnp.asarray(values, jnp.float32), NamedSharding(mesh, P("i")))


def time_alternating(programs: dict, x, repeats: int) -> dict:
    """Check every program against "xla" bit for bit, warm up, then time them in turn."""
    import numpy as np

    reference = np.asarray(programs["xla"](x))
    for name, prog in programs.items():
        assert (np.asarray(prog(x)) == reference).all(), f"{name} differs from xla"
        prog(x).block_until_ready()
    times = {name: [] for name in programs}
    for _ in range(repeats):
        for name, prog in programs.items():
            start = time.perf_counter()
            prog(x).block_until_ready()
            times[name].append(time.perf_counter() - start)
    return times


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
    import numpy as np
    from jax.sharding import Mesh

    import jaxcoll

    n = args.devices
    names = jaxcoll.algorithms(args.op)[1:]  # without "auto"; "xla" first
    if args.algorithms != "all":
        names = ["xla"] + [a for a in args.algorithms.split(",") if a != "xla"]
    mesh = Mesh(np.array(jax.devices()[:n]), ("i",))
    print(f"{args.op}, {n} fake CPU devices, float32, median of {args.repeats} (alternating), "
          f"jax {jax.__version__}")
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        x = verifiable_input(mesh, size)
        programs = {name: program(args.op, name, mesh, args.root) for name in names}
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

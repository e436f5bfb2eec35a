"""Baseline timing: ring allreduce vs psum, naive vs ring, on fake CPU devices.

    python bench/baseline.py [--mib 16] [--devices 8] [--repeats 15]

Each algorithm is compiled and warmed up first; then the algorithms run in alternation
(A B C A B C ...) so that drift on a shared machine hits all alike, and medians are reported.
The full nccl-tests style benchmark is a later issue; this is the baseline it starts from.
"""

import argparse
import statistics
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=float, default=16.0, help="MiB per device (float32)")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--algorithms", default="xla,ring,naive")
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    import jaxcoll

    n = args.devices
    mesh = Mesh(np.array(jax.devices()[:n]), ("i",))
    count = int(args.mib * 2**20 / 4)
    x = jax.device_put(jnp.ones((n, count), jnp.float32),
                       jax.sharding.NamedSharding(mesh, P("i")))
    algorithms = args.algorithms.split(",")
    programs = {
        name: jax.jit(jax.shard_map(lambda b, name=name: jaxcoll.allreduce(b, "i", algorithm=name),
                                    mesh=mesh, in_specs=P("i"), out_specs=P("i")))
        for name in algorithms}
    for name, program in programs.items():  # compile and warm up; check the answer
        out = program(x).block_until_ready()
        assert float(out[0, 0]) == n, (name, float(out[0, 0]))
        program(x).block_until_ready()
    times = {name: [] for name in algorithms}
    for _ in range(args.repeats):
        for name, program in programs.items():
            start = time.perf_counter()
            program(x).block_until_ready()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"allreduce, {n} fake CPU devices, float32, {args.mib:g} MiB per device, "
          f"median of {args.repeats}, jax {jax.__version__}")
    for name in algorithms:
        spread = f"{min(times[name]) * 1e3:.1f}..{max(times[name]) * 1e3:.1f}"
        print(f"  {name:<8} {median[name] * 1e3:9.1f} ms   (min..max {spread} ms)")
    if {"xla", "ring"} <= set(median):
        print(f"  ring / xla   = {median['ring'] / median['xla']:.2f}")
    if {"ring", "naive"} <= set(median):
        print(f"  naive / ring = {median['naive'] / median['ring']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

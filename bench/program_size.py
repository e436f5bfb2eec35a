"""How a collective's program grows with the rank count: StableHLO size and trace + lower
time of one call on a (n,)-device mesh of fake CPU devices, every registered algorithm beside
lax's built-in.

    python bench/program_size.py                 # n = 8, 64, 256, 1024: a table (minutes)
    python bench/program_size.py --ns 8,64       # fewer
    python bench/program_size.py --ns 4096 --skip naive,pairwise,two_shot

Each n runs in a process of its own (the device count is fixed at start). The schedule is built
first and not timed (``jaxcoll.schedule`` is cached); what is timed is tracing and lowering the
jitted shard_map, as a user's first call pays it before compiling.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

CALL = {
    "allreduce": "jaxcoll.allreduce(x, 'i', algorithm=a)",
    "allgather": "jaxcoll.allgather(x, 'i', algorithm=a, tiled=True)",
    "reduce_scatter": "jaxcoll.reduce_scatter(x, 'i', algorithm=a, tiled=True)",
    "alltoall": "jaxcoll.alltoall(x, 'i', split_dim=0, concat_dim=0, tiled=True, algorithm=a)",
    "broadcast": "jaxcoll.broadcast(x, 'i', algorithm=a)",
    "reduce": "jaxcoll.reduce(x, 'i', algorithm=a)",
    "gather": "jaxcoll.gather(x, 'i', tiled=True, algorithm=a)",
    "scatter": "jaxcoll.scatter(x, 'i', tiled=True, algorithm=a)",
}


def measure(n: int, skip=(), primitives=tuple(CALL)) -> list[dict]:
    """Every algorithm but ``skip`` of ``primitives`` on n ranks, in this process (n devices
    already set)."""
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, PartitionSpec as P

    import jaxcoll

    mesh = Mesh(np.array(jax.devices()[:n]), ("i",))
    rows = []
    for primitive in primitives:
        call = CALL[primitive]
        for a in jaxcoll.algorithms(primitive):
            if a in ("auto", "hierarchical", *skip):
                continue
            if a != "xla":
                jaxcoll.schedule(primitive, a, n)
            body = eval(f"lambda x: {call}", {"jaxcoll": jaxcoll, "a": a})
            f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"), out_specs=P("i")))
            began = time.perf_counter()
            text = f.lower(jax.ShapeDtypeStruct((n * n * 4,), jnp.float32)).as_text()
            rows.append(dict(primitive=primitive, algorithm=a, n=n, bytes=len(text),
                             seconds=time.perf_counter() - began))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ns", default="8,64,256,1024")
    parser.add_argument("--skip", default="",
                        help="comma-separated algorithms not to lower (those of n - 1 distinct "
                             "permutations take minutes at 4096 ranks)")
    parser.add_argument("--primitives", default=",".join(CALL))
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # a child process
    args = parser.parse_args(argv)
    skip = tuple(filter(None, args.skip.split(",")))
    if args.one:
        print(json.dumps(measure(args.one, skip, args.primitives.split(","))))
        return 0
    rows = []
    for n in map(int, args.ns.split(",")):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAXCOLL_CALIBRATE": "0",
               "XLA_FLAGS": f"--xla_force_host_platform_device_count={n}"}
        out = subprocess.run([sys.executable, __file__, "--one", str(n), "--skip", args.skip,
                              "--primitives", args.primitives],
                             env=env, check=True, capture_output=True, text=True).stdout
        rows += json.loads(out.splitlines()[-1])
        print(f"n = {n} done", file=sys.stderr, flush=True)
    ns = sorted({r["n"] for r in rows})
    print("| primitive | algorithm | " + " | ".join(f"n = {n}" for n in ns) + " |")
    print("|---|---|" + "---|" * len(ns))
    for key in dict.fromkeys((r["primitive"], r["algorithm"]) for r in rows):
        cells = [next((f"{r['bytes'] / 1e3:,.0f} KB, {r['seconds']:.2f} s" for r in rows
                       if (r["primitive"], r["algorithm"], r["n"]) == (*key, n)), "not run")
                 for n in ns]
        print(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

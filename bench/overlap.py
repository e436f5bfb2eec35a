"""Collective matmul against the unfused built-ins: time, XLA's temporary memory, and what the
α-β model predicts with and without overlap (not a test).

    python bench/overlap.py [--shapes 256x1024x1024,1024x1024x64] [--iters 15] [--json F]

A shape ``RxKxP`` is this rank's x ``(R, K)`` and w ``(K, P)`` (allgather_matmul), or x
``(n R, K)`` and the result ``(R, P)`` (matmul_reduce_scatter). Each jaxcoll algorithm runs
beside ``algorithm="xla"`` (``all_gather`` then one dot; one dot then ``psum_scatter``),
alternating, medians; all must agree bit for bit on small integers first.

The prediction measures, on the same devices, ``c``: every rank multiplying one block
(R, K) @ (K, P) at once, and ``t``: every rank sending what a round moves to its ring neighbour
at once (an (R, K) block of x for allgather_matmul, an (R, P) partial sum for
matmul_reduce_scatter; half of one each way for the bidirectional ring), each in a loop of 8 so
dispatch is amortised. With n ranks, n-1 rounds: the unfused reference takes about
(n-1)·t + n·c (the transfers, then one n-times larger dot); a fused ring that overlaps takes
(n-1)·max(c, t) + c; one that overlaps nothing takes (n-1)·(c + t) + c.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

AXIS = "i"
STEPS = 8  # calls per timed loop in the component measurements


def parse_shape(text: str) -> tuple[int, int, int]:
    rows, k, p = (int(v) for v in text.lower().split("x"))
    return rows, k, p


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # compute-bound (c >> t on CPU), then c ~ t, then transfer-bound
    parser.add_argument("--shapes", default="256x1024x1024,1024x1024x64,1024x1024x16")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--iters", type=int, default=15)
    parser.add_argument("--json", help="write the rows here")
    # model: the prediction with overlap (the reference's is its own, unfused); serial: the
    # same schedule with nothing overlapped
    args = parser.parse_args(argv)

    import jax
    jax.config.update("jax_num_cpu_devices", args.devices)
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    import jaxcoll
    from jaxcoll.tools.bench import time_alternating

    n = args.devices
    mesh = Mesh(np.array(jax.devices()[:n]), (AXIS,))
    ring = [(r, (r + 1) % n) for r in range(n)]

    def spmd(fn):
        return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=P(AXIS), out_specs=P(AXIS)))

    def put(array):
        return jax.device_put(array, NamedSharding(mesh, P(AXIS)))

    def per_call(fn, *operands) -> float:
        """Seconds for one of STEPS calls of ``fn`` on every rank at once (median of 7)."""
        program = spmd(lambda *a: lax.fori_loop(0, STEPS, lambda i, y: fn(y, *a[1:]), a[0]))
        program(*operands).block_until_ready()
        times = []
        for _ in range(7):
            start = time.perf_counter()
            program(*operands).block_until_ready()
            times.append(time.perf_counter() - start)
        return statistics.median(times) / STEPS

    def ints(shape, seed):
        return np.random.default_rng(seed).integers(-2, 3, size=shape).astype(np.float32)

    print(f"jax {jax.__version__}, {n} {jax.default_backend()} devices, float32, {args.iters} "
          "alternating calls, medians; temp = XLA's temporary memory per rank")
    print(f"{'op':<22}{'shape':>15}{'algorithm':>19}{'ms':>8}{'/ xla':>7}{'temp KiB':>10}"
          f"{'model':>8}{'serial':>8}{'c ms':>7}{'t ms':>7}")
    rows_out = []
    for rows, k, p in (parse_shape(s) for s in args.shapes.split(",")):
        block, weight = put(ints((n * rows, k), 0)), put(ints((n * k, p), 1))
        def product(y, w):  # one block's product, shaped as the loop's carry y: (rows, k)
            out = y @ w  # (rows, p)
            return out[:, :k] if p >= k else jnp.pad(out, ((0, 0), (0, k - p)))
        c = per_call(product, block, weight)
        operands = {"allgather_matmul": (block, weight),
                    "matmul_reduce_scatter": (put(ints((n * n * rows, k), 3)), weight)}
        for op, (x, w) in operands.items():
            moved = k if op == "allgather_matmul" else p  # x's blocks travel, or partial sums
            t = {pieces: per_call(lambda y: lax.ppermute(y, AXIS, ring),
                                  put(ints((n * -(-rows // pieces), moved), 2)))
                 for pieces in (1, 2)}
            call = getattr(jaxcoll, op)
            programs = {a: spmd(lambda x, w, a=a: call(x, w, AXIS, algorithm=a))
                        for a in ("xla", "ring", "bidirectional_ring")}
            want = np.asarray(programs["xla"](x, w))
            for name, program in programs.items():
                assert np.array_equal(np.asarray(program(x, w)), want), f"{op} {name} is wrong"
            times = time_alternating({a: (lambda _, f=f: f(x, w)) for a, f in programs.items()},
                                     None, args.iters)
            xla_ms = statistics.median(times["xla"]) * 1e3
            for name, program in programs.items():
                ms = statistics.median(times[name]) * 1e3
                pieces = 2 if name == "bidirectional_ring" else 1
                model = ((n - 1) * t[1] + n * c if name == "xla"
                         else (n - 1) * max(c, t[pieces]) + c)
                temp = program.lower(x, w).compile().memory_analysis().temp_size_in_bytes
                rows_out.append(dict(
                    op=op, shape=[rows, k, p], algorithm=name, ms=ms, ratio=ms / xla_ms,
                    temp_bytes=temp, model_ms=model * 1e3, c_ms=c * 1e3, t_ms=t[pieces] * 1e3,
                    no_overlap_ms=((n - 1) * (c + t[pieces]) + c) * 1e3))
                row = rows_out[-1]
                print(f"{op:<22}{'x'.join(map(str, (rows, k, p))):>15}{name:>19}{ms:>8.2f}"
                      f"{ms / xla_ms:>7.2f}{temp / 1024:>10.0f}{row['model_ms']:>8.2f}"
                      f"{row['no_overlap_ms'] if name != 'xla' else row['model_ms']:>8.2f}"
                      f"{c * 1e3:>7.2f}{t[pieces] * 1e3:>7.2f}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"jax": jax.__version__, "devices": n, "backend": jax.default_backend(),
                       "rows": rows_out}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

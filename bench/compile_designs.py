"""Whole-step compile against the layout of the gradients in the allreduce (not a test): the
step of bench/compile_step.py, its gradients averaged by one hand-written ring allreduce laid
out five ways, beside ``lax.pmean`` and ``jaxcoll.allreduce(algorithm="ring")``.

    JAXCOLL_CALIBRATE=0 python bench/compile_designs.py [--repeats 3] [--designs packed,each]

The designs (the same ring, 2(n - 1) rounds in two ``fori_loop``s, only the layout differs):

- ``packed``: the leaves concatenated into one buffer, cut back by static slices at the end
  (what jaxcoll did before ``_columns``, now in jaxcoll/packing.py);
- ``leaves``: each leaf its own (n, c) buffer in the loops' state; one ppermute per round
  carries every leaf's chunk (concatenated; cut by static slices inside the loop body);
- ``each``: each leaf its own buffer and its own ppermute per round (148 per round);
- ``stacked``: leaves of one (n, c) shape stacked into one (k, n, c) buffer, one ppermute per
  shape per round; unstacked at the end;
- ``shapes``: each leaf its own buffer; one ppermute per shape per round (stacked chunks,
  unstacked inside the loop body).

XLA's CPU compiler compiles one kernel per distinct fusion: a slice at a leaf's own offset
makes the fusion that reads it (the leaf's optimizer update, or its add inside the loop) a
kernel of its own, where pmean's per-leaf results share one kernel per shape. Medians of fresh
compiles, alternating; every design is checked against pmean first.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys

import compile_step as step

DESIGNS = ("packed", "leaves", "each", "stacked", "shapes")


def ring_mean(design: str, n: int):
    """average(tree) over ``step.AXIS`` by a ring allreduce in ``design``'s layout."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import lax

    ring = [(i, (i + 1) % n) for i in range(n)]

    def row(buf, i, axis=0):  # row i of buf along axis, kept as a dimension of 1
        return lax.dynamic_index_in_dim(buf, i, axis, keepdims=True)

    def ring_allreduce(bufs, axis, pack, unpack):
        """The seed's ring on a list of buffers (n chunks along ``axis``): reduce-scatter
        then allgather; ``pack`` turns the list of outgoing chunks into ppermute's operand,
        ``unpack`` its result back into one chunk per buffer."""
        me = lax.axis_index(step.AXIS)

        def send(bufs, chunk):
            return unpack(lax.ppermute(pack([row(b, chunk, axis) for b in bufs]),
                                       step.AXIS, ring))

        def reduce_scatter(k, bufs):
            into = (me - k - 1) % n
            return [lax.dynamic_update_index_in_dim(b, row(b, into, axis) + got, into, axis)
                    for b, got in zip(bufs, send(bufs, (me - k) % n))]

        def allgather(k, bufs):
            return [lax.dynamic_update_index_in_dim(b, got, (me - k) % n, axis)
                    for b, got in zip(bufs, send(bufs, (me - k + 1) % n))]

        return lax.fori_loop(0, n - 1, allgather,
                             lax.fori_loop(0, n - 1, reduce_scatter, bufs))

    def chunked(leaf):  # (shape) -> (n, c), zero-padded
        c = -(-leaf.size // n)
        return jnp.pad(leaf.reshape(-1), (0, n * c - leaf.size)).reshape(n, c)

    def leaf_back(buf, leaf):  # (n, c) -> leaf's shape, averaged
        return buf.reshape(-1)[:leaf.size].reshape(leaf.shape) / n

    def by_shape(bufs):  # indices of the buffers of each (shape, dtype), in order
        groups: dict = {}
        for i, buf in enumerate(bufs):
            groups.setdefault((buf.shape, buf.dtype), []).append(i)
        return list(groups.values())

    def regroup(groups, stacks, count):  # stacks[g][j] is item groups[g][j]
        out = [None] * count
        for group, stack in zip(groups, stacks):
            for j, i in enumerate(group):
                out[i] = stack[j]
        return out

    def average(tree):
        leaves, treedef = jax.tree.flatten(tree)
        if design == "packed":
            flat = jnp.concatenate([leaf.reshape(-1) for leaf in leaves])
            (buf,) = ring_allreduce([chunked(flat)], 0, lambda xs: xs[0], lambda got: [got])
            flat = leaf_back(buf, flat)
            starts = np.cumsum([0] + [leaf.size for leaf in leaves])
            return treedef.unflatten([flat[s:s + leaf.size].reshape(leaf.shape)
                                      for s, leaf in zip(starts, leaves)])
        bufs = [chunked(leaf) for leaf in leaves]
        if design == "leaves":
            cuts = np.cumsum([b.shape[1] for b in bufs])[:-1]
            out = ring_allreduce(bufs, 0, lambda xs: jnp.concatenate(xs, axis=1),
                                 lambda got: jnp.split(got, cuts, axis=1))
        elif design == "each":
            out = ring_allreduce(bufs, 0, lambda xs: xs, lambda got: got)
        elif design == "stacked":
            groups = by_shape(bufs)
            stacks = [jnp.stack([bufs[i] for i in group]) for group in groups]  # (k, n, c)
            out = regroup(groups, ring_allreduce(stacks, 1, lambda xs: xs, lambda got: got),
                          len(bufs))
        elif design == "shapes":
            groups = by_shape(bufs)
            out = ring_allreduce(
                bufs, 0, lambda xs: [jnp.stack([xs[i] for i in group]) for group in groups],
                lambda got: regroup(groups, got, len(bufs)))
        else:
            raise ValueError(f"unknown design {design!r}; one of {', '.join(DESIGNS)}")
        return treedef.unflatten([leaf_back(b, leaf) for b, leaf in zip(out, leaves)])

    return average


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run-iters", type=int, default=5)
    args = parser.parse_args(argv)

    import jax
    n = 8
    jax.config.update("jax_num_cpu_devices", n)
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    mesh = Mesh(np.array(jax.devices()[:n]), (step.AXIS,))
    params = step.init_params(jax.random.key(0))
    tokens = jax.device_put(
        jax.random.randint(jax.random.key(1), (n * step.BATCH, step.SEQ + 1), 0, step.VOCAB),
        NamedSharding(mesh, P(step.AXIS)))
    variants = step.averages(["ring"])
    variants.update({f"hand ring {d}": ring_mean(d, n) for d in args.designs.split(",")})

    def averaged(average):
        return jax.jit(jax.shard_map(average, mesh=mesh, in_specs=P(), out_specs=P(),
                                     check_vma=False))(params)

    reference = averaged(variants["pmean"])
    for name, average in variants.items():
        error = max(float(jnp.max(jnp.abs(a - b))) for a, b in
                    zip(jax.tree.leaves(averaged(average)), jax.tree.leaves(reference)))
        if error > 1e-6:
            raise SystemExit(f"compile_designs: {name} differs from pmean by {error:g}")
    print(f"# {len(jax.tree.leaves(params))} leaves, {n} devices, jax {jax.__version__}; "
          f"medians of {args.repeats} fresh compiles (alternating), {args.run_iters} runs each; "
          "every design equals pmean's mean (max |difference| <= 1e-6)")
    times = {name: [] for name in variants}
    rates = itertools.count(1)
    for _ in range(args.repeats):
        for name, average in variants.items():
            times[name].append(step.measure(mesh, average, 1e-3 * (1 + next(rates) * 1e-6),
                                            (params, tokens), args.run_iters))
    print(f"{'average':<20} {'compile s':>9} {'(CPU s)':>8} {'CPU / pmean':>11} {'step ms':>8} "
          f"{'step / pmean':>12}")
    base = None
    for name, samples in times.items():
        _, _, compile_, cpu, run = (statistics.median(t) for t in zip(*samples))
        base = base or (cpu, run)
        print(f"{name:<20} {compile_:9.2f} {cpu:8.2f} {cpu / base[0]:11.2f} {run * 1e3:8.1f} "
              f"{run / base[1]:12.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

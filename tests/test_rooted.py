"""Broadcast, reduce, gather, scatter (and tree allreduces) against the lax references.

One compiled program per (primitive, algorithm, n) holds every case: every root, each with
the next of the element counts {0, 1, 4, 7, 100, 10000} and dtypes in turn (those small n
leave out run at the last root); every op x dtype for reduce and
gather/scatter layouts (tiled both ways, dim != 0), which the packing code shared by all
algorithms handles: for binomial at every n, for the others at FULL_NS.
``pytest --deep`` crosses every root with every count, dtype and op.
"""

import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache, partial

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxcoll
from jaxcoll.tools import check
from jaxcoll.tools.check import ROOTED
from helpers import (AXIS, COUNTS, DTYPES, assert_same, count_permutes, exact_inputs, grad_of,
                     mesh, other_collectives, ours_vs_xla, per_rank)
from jaxcoll.ir.families import SCHEDULES, build_schedule, pipeline_pieces
from jaxcoll.ir.families.tree import heap_children
from jaxcoll.analysis import model
from jaxcoll.lowering.execute import execute, in_sequence
from jaxcoll.ir.families import binomial

FULL_NS = (2, 3, 8)  # besides binomial, algorithms run ops and layouts at these n


@dataclass(frozen=True)
class Case:
    root: int
    dtype: type
    shape: tuple
    op: str = "sum"
    dim: int = 0
    tiled: bool = True  # gather and scatter only


def ops_for(dtype):
    return jaxcoll.OPS if jnp.issubdtype(dtype, jnp.floating) else ("sum", "max", "min")


def _shape(primitive, n, count):
    """A 1-D input of about ``count`` elements (scatter needs a multiple of n)."""
    return (n * -(-count // n),) if primitive == "scatter" else (count,)


def cases(primitive: str, algorithm: str, n: int, deep: bool) -> list[Case]:
    f32 = jnp.float32
    if deep:
        return [Case(root, dtype, _shape(primitive, n, count), op)
                for root in range(n) for count in COUNTS for dtype in DTYPES
                for op in (ops_for(dtype) if primitive == "reduce" else ("sum",))]
    # Every root, each with the next element count and dtype in turn; then the counts and
    # dtypes that small n did not reach, at the last root.
    out = [Case(root, DTYPES[root % len(DTYPES)], _shape(primitive, n, COUNTS[root % len(COUNTS)]))
           for root in range(n)]
    out += [Case(n - 1, f32, _shape(primitive, n, count)) for count in COUNTS[n:]]
    out += [Case(n - 1, dtype, _shape(primitive, n, 7)) for dtype in DTYPES[n:]]
    if not (algorithm == "binomial" or n in FULL_NS):
        return out
    if primitive == "reduce":
        out += [Case(0, dtype, (7,), op) for dtype in DTYPES for op in ops_for(dtype)
                if op != "sum"]
    if primitive == "gather":
        out += [Case(n // 2, f32, (3, 5), dim=1, tiled=False), Case(n // 2, f32, (), tiled=False),
                Case(n // 2, f32, (3, 5), dim=-1)]
    if primitive == "scatter":
        out += [Case(n // 2, f32, (3, n), dim=1, tiled=False),
                Case(n // 2, f32, (n,), tiled=False), Case(n // 2, f32, (2, 2 * n), dim=-1)]
    return out


def call(primitive: str, case: Case, algorithm: str, x):
    fn = getattr(jaxcoll, primitive)
    kwargs = dict(root=case.root, algorithm=algorithm)
    if primitive == "reduce":
        kwargs["op"] = case.op
    if primitive in ("gather", "scatter"):
        kwargs.update(dim=case.dim, tiled=case.tiled)
    return fn(x, AXIS, **kwargs)


@lru_cache(maxsize=None)
def sweep(primitive: str, algorithm: str, n: int, deep: bool):
    the_cases = cases(primitive, algorithm, n, deep)
    return the_cases, ours_vs_xla(the_cases, partial(call, primitive), algorithm, n)


PAIRS = [(p, a) for p in ROOTED for a in sorted(SCHEDULES[p])]


@pytest.mark.sweep
@pytest.mark.parametrize("n", range(1, 9))
@pytest.mark.parametrize("primitive, algorithm", PAIRS)
def test_rooted_matches_reference(primitive, algorithm, n, request):
    deep = request.config.getoption("--deep")
    the_cases, program = sweep(primitive, algorithm, n, deep)
    inputs = [exact_inputs(n, c.shape, c.dtype, seed=i) for i, c in enumerate(the_cases)]
    for case, (got, want) in zip(the_cases, program(inputs)):
        assert_same(got, want, f"{primitive} {algorithm} n={n} {case}")


def test_reduce_leaves_zeros_off_the_root():
    n, root = 5, 3
    x = exact_inputs(n, (6,), jnp.int32)
    out = np.asarray(per_rank(lambda b: jaxcoll.reduce(b, AXIS, root=root, algorithm="tree"),
                              n)(x))
    assert (out[root] == np.asarray(x).sum(0)).all()
    assert not np.delete(out, root, axis=0).any()


def test_pipeline_piece_rule():
    mib = 1 << 20
    assert [pipeline_pieces(b) for b in (0, 1, 16 * mib, 16 * mib + 1, 80 * mib, 1 << 30)] == [
        1, 1, 1, 2, 5, 8]
    assert build_schedule("broadcast", "tree", 8, 0, 3).n_chunks == 3
    assert build_schedule("broadcast", "binomial", 8, 0, 3).n_chunks == 1  # not pipelined
    chain = build_schedule("broadcast", "chain", 8, 2, 5)
    assert (chain.n_chunks, chain.n_rounds) == (5, 8 - 2 + 5)  # the pipeline fills, then drains


@pytest.mark.parametrize("primitive, algorithm", [
    ("broadcast", "tree"), ("reduce", "tree"), ("allreduce", "tree"), ("allreduce", "double_tree"),
    ("broadcast", "chain"), ("reduce", "chain")])
def test_pipelined_in_pieces_matches_reference(primitive, algorithm, monkeypatch):
    """The public path with 3 pieces (as a tree's message of 33..48 MiB would get, or a
    chain's of about 1 MiB), on small inputs."""
    monkeypatch.setattr(model, "pipeline_pieces", lambda nbytes: 3)
    monkeypatch.setattr(model, "model_pieces",
                        lambda primitive, algorithm, n, nbytes, calibration_=None: 3)
    n = 6
    kwargs = {} if primitive == "allreduce" else {"root": 4}
    fn = getattr(jaxcoll, primitive)
    program = per_rank(lambda b: in_sequence(lambda v, a: fn(v, AXIS, algorithm=a, **kwargs),
                                             [b, b], [algorithm, "xla"]), n)
    got, want = program(exact_inputs(n, (100,), jnp.int32))
    assert_same(got, want)


@pytest.mark.parametrize("n", [2, 5, 8])
def test_binomial_in_pieces_is_still_a_broadcast(n):
    root, pieces = n - 1, 3
    schedules = [binomial.broadcast(n, root, pieces), binomial.reduce(n, root, pieces)]
    x = exact_inputs(n, (1, 10), jnp.int32)  # (1 block, 10) per rank
    program = per_rank(lambda b: in_sequence(lambda v, s: execute(s, v, AXIS, lax.add),
                                             [b, b], schedules), n)
    down, up = program(x)
    assert_same(down, jnp.broadcast_to(x[root], x.shape))
    assert_same(up[root], x.sum(0))


# ----------------------------------------------------------------------------- round counts

def _heap_ready_rounds(n):
    """When each rank of the heap tree has the data, one send per round, left child first."""
    ready = [0] * n
    for v in range(n):
        for order, child in enumerate(heap_children(v, n), start=1):
            ready[child] = ready[v] + order
    return max(ready)


@pytest.mark.parametrize("n", range(1, 34))
def test_textbook_round_counts(n):
    log2 = (n - 1).bit_length()  # ceil(log2 n)
    depth = n.bit_length() - 1  # of the heap tree
    assert build_schedule("broadcast", "naive", n, n - 1).n_rounds == n - 1
    assert build_schedule("broadcast", "binomial", n, n // 2).n_rounds == log2
    assert build_schedule("reduce", "binomial", n, n // 2).n_rounds == log2
    assert build_schedule("scatter", "binomial", n, 1 % n).n_rounds == log2
    assert build_schedule("gather", "binomial", n, 0).n_rounds == log2
    tree_rounds = build_schedule("broadcast", "tree", n, n - 1).n_rounds
    assert tree_rounds == _heap_ready_rounds(n) <= 2 * depth
    if n == (1 << (depth + 1)) - 1:  # a full heap tree: exactly 2 x depth
        assert tree_rounds == 2 * depth
    assert build_schedule("allreduce", "tree", n).n_rounds == 2 * tree_rounds


@pytest.mark.parametrize("n", range(2, 20))
def test_double_tree_shares_out_the_interior_ranks(n):
    """No rank forwards (is interior) in both trees: each is a leaf in at least one."""
    schedule = build_schedule("allreduce", "double_tree", n, 0, 1)
    down = schedule.rounds[len(schedule.rounds) // 2:]  # the broadcast half
    senders = {0: set(), 1: set()}  # tree A carries chunk 0, tree B chunk 1
    for round_ in down:
        for t in round_:
            senders[t.chunks[0]].add(t.src)
    assert not senders[0] & senders[1]


# ----------------------------------------------------------------------------- HLO, grads

@pytest.mark.parametrize("primitive, algorithm", PAIRS)
def test_hlo_holds_only_collective_permutes(primitive, algorithm):
    n = 8
    fn = lambda b: call(primitive, Case(3, jnp.float32, (8 * n,)), algorithm, b)  # noqa: E731
    hlo = per_rank(fn, n).lower(jnp.zeros((n, 8 * n))).compile().as_text()
    assert count_permutes(hlo) > 0
    assert other_collectives(hlo) == [], f"{primitive} {algorithm}"


@pytest.mark.parametrize("primitive, algorithm", [
    ("broadcast", "tree"), ("broadcast", "binomial"), ("broadcast", "scatter_allgather"),
    ("reduce", "tree"), ("reduce", "reduce_scatter_gather"), ("allreduce", "tree"),
    ("allreduce", "double_tree")])
def test_grad_matches_reference(primitive, algorithm):
    n = 5
    kwargs = {} if primitive == "allreduce" else {"root": 2}
    ours = grad_of(lambda b: getattr(jaxcoll, primitive)(b, AXIS, algorithm=algorithm, **kwargs),
                   mesh(n), AXIS)
    ref = grad_of(lambda b: getattr(jaxcoll, primitive)(b, AXIS, algorithm="xla", **kwargs),
                  mesh(n), AXIS)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(n, 11)), jnp.float32)
    np.testing.assert_allclose(ours(x), ref(x), rtol=1e-5, atol=1e-6)


def test_shortcuts():
    n = 4
    x = exact_inputs(n, (9,), jnp.float32)
    shortcuts = [lambda b: jaxcoll.tree_allreduce(b, AXIS),
                 lambda b: jaxcoll.tree_broadcast(b, AXIS, root=2)]
    got = per_rank(lambda b: in_sequence(lambda v, call: call(v), [b, b], shortcuts), n)(x)
    assert_same(got[0], jnp.broadcast_to(x.sum(0), x.shape))
    assert_same(got[1], jnp.broadcast_to(x[2], x.shape))


# ----------------------------------------------------------------------------- larger n

@pytest.mark.subprocess_jax
def test_n12_and_n16_in_a_subprocess(request):
    """Every primitive x algorithm at n = 12 (folded: 8 + 4 extra ranks; a 2 x 6 mesh for
    hierarchical) and, with --deep, 16 (root n - 1) via the main job."""
    ranks = (12, 16) if request.config.getoption("--deep") else (12,)
    result = subprocess.run([sys.executable, "-m", "jaxcoll", "--devices", "16", "--ranks",
                             ",".join(map(str, ranks)), "--counts", "7"], capture_output=True,
                            text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    checks = sum(len(check.cases(n)) for n in ranks)  # hierarchical allreduce on 3 levels too
    assert f"{checks} of {checks} checks match the xla reference exactly" in result.stdout

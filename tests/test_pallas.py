"""The second executor (pallas_kernel.py): every registered schedule as one Pallas TPU kernel,
run in TPU interpret mode on the CPU devices, equal to the XLA executor bit for bit and to lax,
through jvp, grad and vmap, with interpret mode's race detector on: a race, or a semaphore left
non-zero at kernel exit, fails the test.

An interpreted call is slow (one machine's time: bench/RESULTS.md, "Numbers that were in code
comments"): each schedule runs at one of n = 8, 6, 3, 2, 1 in turn (at every one with
``--deep``). Every test runs under a watchdog (helpers.watchdog): a kernel
that never returns fails its test after ``BOUND_S`` seconds instead of hanging the run."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import jaxcoll
from jaxcoll.lowering.pallas_kernel import Unsynchronized, races_found
from jaxcoll.ir.records import RECORDS

from helpers import AXIS, assert_same, exact_inputs, per_rank, watchdog

CHECKED = jaxcoll.Pallas(interpret=pltpu.InterpretParams(detect_races=True,
                                                         dma_execution_mode="eager"))
LEFT_OVER = "at kernel exit"  # "Semaphore .. has non-zero count for .. at kernel exit: .."

# every registered schedule: (primitive, algorithm), hierarchical ones by their levels
CASES = [(primitive, algorithm) for primitive in RECORDS
         for algorithm in jaxcoll.algorithms(primitive)
         if algorithm not in ("xla", "auto")]
LEVELS = {8: (2, 4), 6: (3, 2), 3: (3, 1), 2: (2, 1), 1: (1,)}
NS = (8, 6, 3, 2, 1)  # by default schedule i runs at NS[i % 5]; with --deep at every one
# a test's bound: its calls take seconds; a kernel that never returns fails the test at this
BOUND_S = 120

# (n, axis_index_groups, allreduce's algorithm, batched under jax.vmap): groups of different
# sizes (a singleton among them or not), singletons only, one group of all, several groups of
# one size; --deep adds the rows of DEEP_GROUPS
GROUPS = [
    (3, ((0, 2), (1,)), "ring", False),
    (5, ((0, 1), (2, 3, 4)), "ring", True),
    (5, ((0,), (1,), (2,), (3,), (4,)), "ring", False),
    (5, ((0, 1, 2, 3, 4),), "double_tree", False),
    (8, ((0, 4), (1, 5), (2, 6), (3, 7)), "ring", True),
    (8, ((0, 1, 2), (3, 4, 5, 6, 7)), "two_shot", False),
]
DEEP_GROUPS = [
    (3, ((0,), (1,), (2,)), "ring", True),
    (3, ((0, 1, 2),), "ring", True),
    (5, ((4,), (0, 1, 2, 3)), "recursive_doubling", False),
    (6, ((0, 3), (1, 4), (2, 5)), "naive", True),
    (6, ((5, 0, 1), (2, 3, 4)), "ring", False),
    (8, ((7,), (0, 1, 2, 3, 4, 5, 6)), "ring", True),
    (8, ((0, 2, 4, 6, 1), (3, 5), (7,)), "double_tree", False),
    (8, ((0, 1), (2, 3), (4, 5), (6, 7)), "tree", False),
    (8, (tuple(range(8)),), "swing", True),
]


@pytest.fixture(autouse=True)
def bounded(request):
    """Every test of this module under a watchdog of ``BOUND_S`` seconds."""
    with watchdog(BOUND_S, request.node.name):
        yield


def pytest_generate_tests(metafunc):
    """(primitive, algorithm, n) cases, marked as sweeps (``--sweep-ns`` keeps some n); the
    group shapes (GROUPS, and DEEP_GROUPS with ``--deep``)."""
    deep = metafunc.config.getoption("--deep")
    if "groups" in metafunc.fixturenames:
        metafunc.parametrize("n, groups, algorithm, batched", [
            pytest.param(*case, id=_group_id(*case)) for case in GROUPS + DEEP_GROUPS * deep])
    if "primitive" in metafunc.fixturenames and "n" in metafunc.fixturenames:
        metafunc.parametrize("primitive, algorithm, n", [
            pytest.param(primitive, algorithm, n, marks=pytest.mark.sweep)
            for i, (primitive, algorithm) in enumerate(CASES)
            for n in (NS if deep else NS[i % len(NS):][:1])])


def _group_id(n: int, groups, algorithm: str, batched: bool) -> str:
    """``n5-01|234-ring-vmap``: a group case's test id."""
    return "-".join([f"n{n}", "|".join("".join(map(str, g)) for g in groups), algorithm]
                    + ["vmap"] * batched)


def _schedule(primitive: str, algorithm: str, n: int):
    return jaxcoll.schedule(primitive, algorithm, LEVELS[n] if algorithm == "hierarchical"
                            else n)


def _public(primitive: str, x, **kwargs):
    """The public collective on this rank's (rows_in, width) rows, as (rows_out, width)."""
    fn = getattr(jaxcoll, primitive)
    if primitive in ("allgather", "gather"):
        return fn(x[0], AXIS, **kwargs)  # (n, width)
    if primitive == "alltoall":
        return fn(x, AXIS, split_dim=0, concat_dim=0, **kwargs)
    if primitive in ("reduce_scatter", "scatter"):
        return fn(x, AXIS, **kwargs)[None]  # block i of n rows
    return fn(x, AXIS, **kwargs)


@pytest.fixture
def checked(capfd):
    """``checked(fn, *args)``: ``fn(*args)``, failing on a race or a semaphore left over."""
    def run(fn, *args):
        out = jax.block_until_ready(fn(*args))
        jax.effects_barrier()  # the interpreter's last callbacks (its checks) have run
        assert not races_found(), "a race was detected"
        printed = capfd.readouterr().out
        assert LEFT_OVER not in printed, printed
        return out
    yield run
    pltpu.reset_tpu_interpret_mode_state()


def test_every_schedule_equals_the_xla_executor_and_lax(primitive, algorithm, n, checked):
    """Random floats (5 columns): bit for bit the XLA executor's; integer-valued ones (3
    columns, exact in any order): lax's. Columns never meet, so one kernel checks both."""
    schedule = _schedule(primitive, algorithm, n)
    rows = RECORDS[primitive].rows("rows_in", n)
    floats = jax.random.normal(jax.random.key(n), (n, rows, 5))
    integers = exact_inputs(n, (rows, 3), jnp.float32, seed=n)
    x = jnp.concatenate([floats, integers], axis=-1)  # (n, rows_in, 8)

    def both(x):
        return (_public(primitive, x, algorithm=schedule, executor=CHECKED),
                _public(primitive, x, algorithm=schedule),
                _public(primitive, x[:, 5:], algorithm="xla"))
    pallas, xla, lax_ = checked(per_rank(both, n), x)
    what = f"{primitive} {algorithm} n={n}"
    assert_same(pallas, xla, what + ": the XLA executor's")
    assert_same(pallas[..., 5:], lax_, what + ": lax's")


def _loss_grad(fn, n: int):
    """grad of a weighted sum of ``fn``'s per-rank results, as a function of (n, rows, w)."""
    run = per_rank(fn, n)

    def loss(x):
        out = run(x)
        return jnp.sum(jnp.sin(out) * jnp.arange(out.size).reshape(out.shape))
    return jax.jit(jax.grad(loss))


@pytest.mark.parametrize("primitive, algorithm", [
    ("reduce_scatter", "ring"), ("allgather", "recursive_doubling"), ("broadcast", "binomial"),
    ("allreduce", "two_shot")])
def test_grad_equals_lax(primitive, algorithm, checked):
    """The transpose runs the dual schedule through the Pallas executor too."""
    n = 6 if algorithm != "recursive_doubling" else 8
    x = jax.random.normal(jax.random.key(1), (n, RECORDS[primitive].rows("rows_in", n), 4))
    ours = _loss_grad(lambda b: _public(primitive, b, algorithm=algorithm, executor=CHECKED), n)
    want = _loss_grad(lambda b: _public(primitive, b, algorithm="xla"), n)
    np.testing.assert_allclose(checked(ours, x), want(x), rtol=1e-5, atol=1e-5)


def test_jvp_and_vmap_equal_lax(checked):
    """jvp of a sum (the tangent one more kernel), vmap inside the shard_map (the batch rides
    in the width), grad of a vmap and vmap of a grad: as lax's."""
    n = 3
    x = jax.random.normal(jax.random.key(2), (n, 2, 4))

    def jvp(psum):
        return per_rank(lambda b: jax.jvp(psum, (b,), (jnp.cos(b),)), n)

    def vmapped(psum):  # vmap of grad and grad of vmap, in one program
        def body(b):
            grad = jax.grad(lambda v: jnp.sum(jnp.sin(psum(v))))
            return jax.vmap(grad)(b), jax.grad(lambda v: jnp.sum(jax.vmap(psum)(v) ** 2))(b)
        return per_rank(body, n)

    def ours(v):
        return jaxcoll.allreduce(v, AXIS, algorithm="ring", executor=CHECKED)

    def theirs(v):
        return jax.lax.psum(v, AXIS)
    for make in (jvp, vmapped):
        for got, want in zip(checked(make(ours), x), make(theirs)(x)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_groups_ops_dtypes_and_pytrees(checked):
    """axis_index_groups (each group runs the schedule among its members); sum, max, min,
    mean; int32, bfloat16, bools (summed as int32, as psum does); a pytree in one bucket."""
    n, groups = 8, [[0, 2, 4, 6], [1, 3, 5, 7]]
    x = exact_inputs(n, (3, 5), jnp.int32)

    def calls(b, executor):
        tree = {"ints": b, "halves": b[0].astype(jnp.bfloat16), "flags": b[1] > 0}
        return [jaxcoll.allreduce(b, AXIS, op=op, algorithm="ring", executor=executor,
                                  axis_index_groups=groups) for op in ("max", "min")
                ] + [jaxcoll.allreduce(tree, AXIS, op="sum", algorithm="ring",
                                       executor=executor, axis_index_groups=groups),
                     jaxcoll.allreduce(b.astype(jnp.bfloat16), AXIS, op="mean",
                                       algorithm="recursive_doubling", executor=executor)]
    got = checked(per_rank(lambda b: calls(b, CHECKED), n), x)
    want = per_rank(lambda b: calls(b, "xla"), n)(x)
    for ours, theirs in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        assert_same(ours, theirs)


def _grouped(groups, algorithm: str, executor):
    """The collectives with ``axis_index_groups=groups`` on a rank's (rows, width) block:
    allreduce; allgather and reduce_scatter (tiled) where the groups are of one size (lax's
    refuse others, and so do jaxcoll's: docs/sharp_bits.md). ``executor``: jaxcoll's, or
    "lax" for lax's own."""
    groups = [list(g) for g in groups]
    equal = len(set(map(len, groups))) == 1
    if executor == "lax":
        calls = [lambda b: jax.lax.psum(b, AXIS, axis_index_groups=groups)]
        if equal:
            calls += [lambda b: jax.lax.all_gather(b, AXIS, axis_index_groups=groups),
                      lambda b: jax.lax.psum_scatter(b, AXIS, axis_index_groups=groups,
                                                     tiled=True)]
        return lambda b: [call(b) for call in calls]
    kwargs = {"axis_index_groups": groups, "executor": executor}
    calls = [lambda b: jaxcoll.allreduce(b, AXIS, algorithm=algorithm, **kwargs)]
    if equal:
        calls += [lambda b: jaxcoll.allgather(b, AXIS, algorithm="ring", **kwargs),
                  lambda b: jaxcoll.reduce_scatter(b, AXIS, algorithm="ring", tiled=True,
                                                   **kwargs)]
    return lambda b: [call(b) for call in calls]


def test_groups_of_every_shape_equal_lax_on_both_executors(n, groups, algorithm, batched,
                                                           checked):
    """Groups of different sizes, singletons, one group of all, several of one size: both
    executors equal lax bit for bit on integer-valued floats (rows: a multiple of every group's
    size, for reduce_scatter); ``batched``: under jax.vmap over a leading batch of 2, inside
    the shard_map."""
    rows = int(np.lcm.reduce([len(g) for g in groups]))
    x = exact_inputs(n, (2, rows, 3) if batched else (rows, 3), jnp.float32, seed=n)

    def each(executor):
        fn = _grouped(groups, algorithm, executor)
        return jax.vmap(fn) if batched else fn
    # lax's psum with groups takes no check_vma=True (jaxcoll's are typed varying: either)
    pallas, xla, lax_ = checked(per_rank(lambda b: [each(CHECKED)(b), each("xla")(b),
                                                    each("lax")(b)], n, check_vma=False), x)
    for name, ours in (("pallas", pallas), ("xla", xla)):
        for k, (got, want) in enumerate(zip(ours, lax_)):
            assert_same(got, want, f"{name} executor, collective {k}, groups {groups}")


def test_complex_operands_run_on_their_real_parts(checked):
    """complex64 (the kernel runs on float32 pairs: a complex sum is two real ones): sums,
    means and gathers equal lax's, and the XLA executor's bit for bit."""
    n = 3
    x = (exact_inputs(n, (3, 4), jnp.float32) + 1j * exact_inputs(n, (3, 4), jnp.float32, 1)
         ).astype(jnp.complex64)

    def calls(b, executor):
        if executor == "lax":
            return [jax.lax.psum(b, AXIS), jax.lax.pmean(b, AXIS), jax.lax.all_gather(b, AXIS)]
        return [jaxcoll.allreduce(b, AXIS, algorithm="ring", executor=executor),
                jaxcoll.allreduce(b, AXIS, op="mean", algorithm="two_shot", executor=executor),
                jaxcoll.allgather(b, AXIS, algorithm="bruck", executor=executor)]
    pallas, xla, lax_ = checked(per_rank(lambda b: [calls(b, e) for e in (CHECKED, "xla", "lax")],
                                         n), x)
    for got, by_xla, want in zip(pallas, xla, lax_):
        assert_same(got, by_xla)
        np.testing.assert_allclose(got, want, rtol=1e-6)


def _never_returns(b):
    """A Pallas kernel that waits for a semaphore no one signals (the watchdog's test)."""
    def kernel(x_ref, o_ref, sem):
        pl.semaphore_wait(sem, 1)
        o_ref[...] = x_ref[...]
    return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(b.shape, b.dtype),
                          in_specs=[pl.BlockSpec(memory_space=pltpu.VMEM)],
                          out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
                          scratch_shapes=[pltpu.SemaphoreType.REGULAR],
                          interpret=pltpu.InterpretParams())(b)


def test_the_watchdog_fails_a_kernel_that_never_returns(checked):
    """A kernel that waits for ever fails its test at the watchdog's bound (its interpreted
    devices made to raise), and the next interpreted call runs as ever."""
    n = 2
    x = exact_inputs(n, (1, 4), jnp.float32)
    with pytest.raises(pytest.fail.Exception, match="ran past 2 s"):
        with watchdog(2, "a kernel that never returns"):
            jax.block_until_ready(per_rank(_never_returns, n, check_vma=False)(x))
    got = checked(per_rank(lambda b: jaxcoll.allreduce(b, AXIS, algorithm="ring",
                                                       executor=CHECKED), n), x)
    assert_same(got, per_rank(lambda b: jax.lax.psum(b, AXIS), n)(x))


def test_large_buffers_run_in_tiles(checked):
    """A buffer past the interpreter's limit (jax 0.10.2 hangs past ~96 KB) runs as kernels on
    column tiles: 25,000 float32 (100 KB) a rank."""
    n = 8
    x = jax.random.normal(jax.random.key(3), (n, 1, 25_000))
    got = checked(per_rank(lambda b: jaxcoll.allreduce(b, AXIS, algorithm="ring",
                                                       executor=CHECKED), n), x)
    want = per_rank(lambda b: jaxcoll.allreduce(b, AXIS, algorithm="ring"), n)(x)
    assert_same(got, want)


@pytest.mark.parametrize("dropped, caught_by", [
    ("receive_wait", "race"), ("send_wait", "semaphore"), ("ready_wait", "race")])
def test_broken_synchronization_is_caught(dropped, caught_by, capfd):
    """Each wait of the round's handshake, left out on purpose, is caught: a race (the race
    detector, in eager DMA mode: jax 0.10 flags it, jax 0.12 raises it) or a semaphore left
    non-zero at kernel exit."""
    broken = Unsynchronized(interpret=CHECKED.interpret, drop=(dropped,))  # the test hook
    n = 4
    x = jax.random.normal(jax.random.key(4), (n, 1, 8))
    raised = []
    try:
        for step in (lambda: jax.block_until_ready(per_rank(lambda b: jaxcoll.allreduce(
                b, AXIS, algorithm="ring", executor=broken), n)(x)), jax.effects_barrier):
            try:  # the barrier also clears what failed, for the tests after this one
                step()
            except (jax.errors.JaxRuntimeError, ExceptionGroup) as error:
                raised.append(str(error) + "".join(
                    map(str, getattr(error, "exceptions", ()))))
        race = races_found() or any("RACE DETECTED" in text for text in raised)
        left_over = LEFT_OVER in capfd.readouterr().out
    finally:
        pltpu.reset_tpu_interpret_mode_state()
    assert {"race": race, "semaphore": left_over}[caught_by], (race, left_over, raised)


def test_refusals():
    """What the Pallas executor cannot run is refused before anything is traced into XLA."""
    n = 4
    x = jnp.ones((n, 1, 4))
    with pytest.raises(ValueError, match="executor='pallas' runs inside jax.shard_map"):
        jax.vmap(lambda v: jaxcoll.allreduce(v, AXIS, algorithm="ring", executor="pallas"),
                 axis_name=AXIS)(x)
    for kwargs, message in (({"algorithm": "xla"}, "algorithm='xla' calls lax's own"),
                            ({"compress": "bf16", "algorithm": "ring"}, "compress='bf16'"),
                            ({"executor": "mosaic"},
                             "jaxcoll.allreduce: executor='mosaic' is not one of")):
        kwargs = {"executor": "pallas", **kwargs}
        with pytest.raises(ValueError, match=message):
            per_rank(lambda b: jaxcoll.allreduce(b, AXIS, **kwargs), n)(x)

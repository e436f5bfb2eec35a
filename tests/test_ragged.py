"""jaxcoll.ragged_alltoall against a numpy reference of lax.ragged_all_to_all's documented
semantics (lax's own can't run on XLA:CPU), with its gradient against a one-device reference."""

from functools import lru_cache
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, mesh, per_rank

ALGORITHMS = ("naive", "bruck")
WIDTH = 3  # row width (odd on purpose)


def rows(n: int, k: int) -> tuple[int, int]:
    """Operand and output rows for n ranks, k slices per destination: room for every slice of
    up to 3 rows with a gap before each, and some to spare (odd sizes)."""
    return 5 * n * k + 3, 5 * n * k + 7


def ragged_case(n: int, k: int, seed: int):
    """Random per-rank arguments (each with a leading rank axis) that obey lax's rules: slices
    of 0-3 rows, k per destination, laid out with gaps on both sides."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 4, size=(n, n, k))  # sizes[src, dst, j]
    sizes[rng.random(sizes.shape) < 0.25] = 0
    rows_in, rows_out = rows(n, k)
    input_offsets, output_offsets = _layout(sizes, rng), _layout(sizes.transpose(1, 0, 2), rng)
    args = dict(
        operand=rng.integers(-50, 50, size=(n, rows_in, WIDTH)).astype(np.float32),
        output=rng.integers(100, 200, size=(n, rows_out, WIDTH)).astype(np.float32),
        input_offsets=input_offsets.reshape(n, n * k),
        send_sizes=sizes.reshape(n, n * k),
        # src's slice to (dst, j) lands where dst laid out what it receives from (src, j)
        output_offsets=output_offsets.transpose(1, 0, 2).reshape(n, n * k),
        recv_sizes=sizes.transpose(1, 0, 2).reshape(n, n * k))
    return {name: np.asarray(value, np.int32) if "size" in name or "offset" in name else value
            for name, value in args.items()}


def _layout(sizes, rng):
    """Offsets for slices of ``sizes[rank, a, b]`` placed in order in each rank's buffer, with
    a random gap (internal padding) before some of them."""
    offsets = np.zeros_like(sizes)
    for rank in range(sizes.shape[0]):
        at = 0
        for index in np.ndindex(sizes.shape[1:]):
            at += int(rng.integers(0, 2))
            offsets[(rank, *index)] = at
            at += sizes[(rank, *index)]
    return offsets


def reference(operand, output, input_offsets, send_sizes, output_offsets, recv_sizes):
    """lax.ragged_all_to_all's docstring, literally, on every rank at once (numpy or jnp)."""
    n, slices = input_offsets.shape
    k = slices // n
    result = [output[r] for r in range(n)]
    for dst in range(n):
        for i in range(slices):
            src, j = divmod(i, k)
            sent = src_slice = dst * k + j  # the sender's index of this slice
            at, size = int(output_offsets[src, sent]), int(recv_sizes[dst, i])
            start = int(input_offsets[src, src_slice])
            block = operand[src][start:start + size]
            if isinstance(result[dst], np.ndarray):
                result[dst] = result[dst].copy()
                result[dst][at:at + size] = block
            else:
                result[dst] = result[dst].at[at:at + size].set(block)
    return np.stack(result) if isinstance(output, np.ndarray) else jnp.stack(result)


@lru_cache(maxsize=None)
def sharded(n: int, algorithm):
    return per_rank(lambda *args: jaxcoll.ragged_alltoall(*args, AXIS, algorithm=algorithm), n)


def call(n, algorithm, case):
    return sharded(n, algorithm)(*(case[name] for name in (
        "operand", "output", "input_offsets", "send_sizes", "output_offsets", "recv_sizes")))


def test_the_docstring_example():
    """lax.ragged_all_to_all's own example on an axis of size 2."""
    case = dict(operand=np.array([[1, 2, 2], [3, 4, 0]], np.float32)[..., None],
                output=np.zeros((2, 4, 1), np.float32),
                input_offsets=np.array([[0, 1], [0, 1]], np.int32),
                send_sizes=np.array([[1, 2], [1, 1]], np.int32),
                output_offsets=np.array([[0, 0], [1, 2]], np.int32),
                recv_sizes=np.array([[1, 1], [2, 1]], np.int32))
    want = np.array([[1, 3, 0, 0], [2, 2, 4, 0]], np.float32)[..., None]
    for algorithm in ALGORITHMS:
        np.testing.assert_array_equal(call(2, algorithm, case), want)


def test_rows_outside_the_buffers():
    """A negative output offset writes nothing (jnp would wrap it to the end); rows read from
    before the operand are zeros."""
    case = dict(operand=np.array([[1, 2, 2], [3, 4, 0]], np.float32)[..., None],
                output=np.full((2, 4, 1), 9, np.float32),
                input_offsets=np.array([[0, -1], [0, 1]], np.int32),
                send_sizes=np.array([[1, 2], [1, 1]], np.int32),
                output_offsets=np.array([[0, 0], [-1, 2]], np.int32),
                recv_sizes=np.array([[1, 1], [2, 1]], np.int32))
    want = np.array([[1, 9, 9, 9], [0, 1, 4, 9]], np.float32)[..., None]
    np.testing.assert_array_equal(call(2, "naive", case), want)


@pytest.mark.sweep
@pytest.mark.parametrize("n", range(1, 9))
def test_against_the_reference(n):
    """Zero sizes, gaps, one slice per destination for odd n and two for even n (one compile
    per algorithm), three random draws each."""
    k = 1 + (n % 2 == 0)
    for algorithm in ALGORITHMS:
        for seed in range(3):
            case = ragged_case(n, k, seed)
            np.testing.assert_array_equal(call(n, algorithm, case), reference(**case),
                                          err_msg=f"{algorithm}, n={n}, k={k}, seed={seed}")


def test_gradient_is_the_references():
    """vjp in operand and output equals the one-device reference's (it is linear in both)."""
    n = 4
    case = ragged_case(n, 2, seed=7)
    index = {name: case[name] for name in case if name not in ("operand", "output")}
    assert case["send_sizes"].sum() > 0
    cotangent = np.random.default_rng(1).standard_normal(case["output"].shape).astype(np.float32)
    for algorithm in ALGORITHMS:
        ours = lambda operand, output: call(n, algorithm, {**index, "operand": operand,
                                                           "output": output})
        got = jax.vjp(ours, case["operand"], case["output"])[1](cotangent)
        want = jax.vjp(lambda operand, output: reference(operand, output, **index),
                       jnp.asarray(case["operand"]), jnp.asarray(case["output"]))[1](cotangent)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=0, atol=0, err_msg=algorithm)


def test_under_vmap_and_through_jaxcoll_lax():
    """vmap with axis_name runs the same exchange; jaxcoll.lax.ragged_all_to_all has lax's
    signature, and lax's abstract evaluation gives the same result type."""
    n = 3
    case = ragged_case(n, 1, seed=3)
    args = [case[name] for name in ("operand", "output", "input_offsets", "send_sizes",
                                    "output_offsets", "recv_sizes")]
    got = jax.jit(jax.vmap(lambda *a: jaxcoll.lax.ragged_all_to_all(*a, axis_name="v"),
                           axis_name="v"))(*args)
    np.testing.assert_array_equal(got, reference(**case))

    def typed(fn):
        body = lambda *a: fn(*(x[0] for x in a), axis_name=AXIS)[None]
        return jax.eval_shape(jax.shard_map(body, mesh=mesh(n), in_specs=P(AXIS),
                                            out_specs=P(AXIS)), *args)
    assert typed(jaxcoll.lax.ragged_all_to_all) == typed(jax.lax.ragged_all_to_all)


def test_the_program_is_the_schedules_rounds():
    """Evidence from the compiled HLO: bruck on 8 ranks is ceil(log2 8) = 3 rounds, naive 7,
    each round one collective-permute for the slots and one for the (int32) output offsets;
    neither leaves a ragged-all-to-all for XLA."""
    case = ragged_case(8, 1, seed=0)
    for algorithm, rounds in (("bruck", 3), ("naive", 7)):
        hlo = sharded(8, algorithm).lower(*(case[name] for name in (
            "operand", "output", "input_offsets", "send_sizes", "output_offsets",
            "recv_sizes"))).compile().as_text()
        assert "ragged-all-to-all" not in hlo
        permutes = hlo.count("collective-permute-start(") or hlo.count("collective-permute(")
        assert permutes == 2 * rounds, (algorithm, permutes)


def test_padded_bytes():
    """Each rank's message: K slots of min(operand, output) rows."""
    operand, output = jnp.zeros((13, 3), jnp.bfloat16), jnp.zeros((17, 3), jnp.bfloat16)
    assert jaxcoll.ragged.padded_bytes(operand, output, 16) == 16 * 13 * 3 * 2


def test_the_moe_example_checks(monkeypatch):
    """examples/moe.py --check: top-2 routing, dispatch and combine by ragged_alltoall, expert
    MLPs; output and gradients equal the one-device reference's (naive and bruck)."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "examples"))
    import moe
    assert moe.check(mesh(8, names=(moe.AXIS,)))

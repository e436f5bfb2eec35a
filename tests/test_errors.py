"""Misuse gets a ValueError/TypeError from jaxcoll, naming the argument, before XLA sees it."""

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, mesh

N = 4


def trace(fn, x):
    """Trace ``fn`` per rank on 4 ranks (no compile): errors surface at trace time."""
    per_rank = jax.shard_map(lambda b: fn(b[0])[None], mesh=mesh(N), in_specs=P(AXIS),
                             out_specs=P(AXIS))
    return jax.eval_shape(per_rank, jax.ShapeDtypeStruct((N, *x.shape), x.dtype))


f32 = jnp.zeros((3,), jnp.float32)  # per rank
i32 = jnp.zeros((3,), jnp.int32)

MISUSES = [
    (lambda b: jaxcoll.allreduce(b, AXIS, algorithm="rign"), f32, ValueError,
     r"algorithm=.rign. is not one of auto, xla, bidirectional_ring, double_tree, "
     r"halving_doubling, hierarchical, naive, recursive_doubling, ring, tree"),
    (lambda b: jaxcoll.allreduce(b, AXIS, op="prod"), f32, ValueError,
     r"op='prod' is not one of sum, mean, max, min"),
    (lambda b: jaxcoll.allreduce(b, "dp"), f32, ValueError,
     r"axis='dp' is not a bound axis name; the bound axis names here are \('i',\)"),
    (lambda b: jaxcoll.allreduce(b, ["i"]), f32, TypeError, r"axis=\['i'\] must be a mesh axis"),
    (lambda b: jaxcoll.allreduce(b, AXIS, op="mean"), i32, TypeError,
     r"op='mean' needs a floating dtype, got int32"),
    (lambda b: jaxcoll.allreduce(b > 0, AXIS), f32, TypeError, r"does not take bool"),
    (lambda b: jaxcoll.allreduce(b.astype(jnp.complex64), AXIS, op="max"), f32, TypeError,
     r"op='max' is not defined for complex"),
    (lambda b: jaxcoll.allreduce({"a": b, "name": "x"}, AXIS), f32, TypeError,
     r"x has a leaf of type str"),
    (lambda b: jaxcoll.reduce_scatter(b, AXIS), f32, ValueError,
     r"tiled=False needs dimension dim=0 of a leaf of shape \(3,\) to equal the axis size 4"),
    (lambda b: jaxcoll.reduce_scatter(b, AXIS, tiled=True), f32, ValueError,
     r"tiled=True needs dimension dim=0 .* to be a multiple of the axis size 4"),
    (lambda b: jaxcoll.reduce_scatter(b[0], AXIS), f32, ValueError,
     r"a 0-d leaf cannot be split"),
    (lambda b: jaxcoll.reduce_scatter(b, AXIS, dim=1), f32, ValueError,
     r"dim=1 is out of range for a leaf of shape \(3,\); allowed: -1..0"),
    (lambda b: jaxcoll.allgather(b, AXIS, dim=2), f32, ValueError,
     r"dim=2 is out of range .* allowed: -2..1"),
    (lambda b: jaxcoll.allgather(b, AXIS, dim=1.0), f32, TypeError, r"dim=1.0 must be an int"),
    (lambda b: jaxcoll.allgather(b[0], AXIS, tiled=True), f32, ValueError,
     r"tiled=True cannot concatenate 0-d leaves"),
    (lambda b: jaxcoll.allreduce(b, AXIS, algorithm="hierarchical"), f32, ValueError,
     r"algorithm='hierarchical' needs axis to be a tuple of two mesh axis names \(outer, "
     r"inner\), e.g. \('node', 'gpu'\); got axis='i'"),
    (lambda b: jaxcoll.alltoall(b, AXIS, split_dim=0, concat_dim=0), f32, ValueError,
     r"tiled=False needs dimension split_dim=0 of a leaf of shape \(3,\) to equal the axis "
     r"size 4"),
    (lambda b: jaxcoll.alltoall(b, AXIS, split_dim=1, concat_dim=0, tiled=True), f32,
     ValueError, r"split_dim=1 is out of range for a leaf of shape \(3,\); allowed: -1..0"),
    (lambda b: jaxcoll.alltoall(jnp.zeros((4, 2)), AXIS, split_dim=0, concat_dim=2), f32,
     ValueError, r"concat_dim=2 is out of range for a leaf of shape \(4, 2\); allowed: -2..1"),
    (lambda b: jaxcoll.alltoall(b, AXIS, split_dim=0, concat_dim=0, algorithm="ring"), f32,
     ValueError, r"algorithm='ring' is not one of auto, xla, bruck, naive"),
]


@pytest.mark.parametrize("fn, x, error, message", MISUSES)
def test_misuse_is_named(fn, x, error, message):
    with pytest.raises(error, match=message) as info:
        trace(fn, x)
    assert str(info.value).startswith("jaxcoll.")


def test_outside_shard_map_says_where_to_call():
    with pytest.raises(ValueError, match=r"no axis is bound here: call it inside jax.shard_map"):
        jaxcoll.allreduce(jnp.ones(3), "dp")


def test_algorithms_lists_names():
    assert jaxcoll.algorithms("allreduce") == (
        "auto", "xla", "bidirectional_ring", "double_tree", "halving_doubling", "hierarchical",
        "naive", "recursive_doubling", "ring", "tree")
    assert jaxcoll.algorithms("alltoall") == ("auto", "xla", "bruck", "naive")
    with pytest.raises(ValueError, match=r"primitive=.bcast. is not one of"):
        jaxcoll.algorithms("bcast")


@pytest.mark.parametrize("args, kwargs, message", [
    (("bcast", "ring", 4), {}, r"primitive='bcast' is not one of allreduce"),
    (("broadcast", "ring", 4), {}, r"algorithm='ring' is not one of binomial, naive"),
    (("allreduce", "ring", 0), {}, r"n=0 must be an int >= 1"),
    (("broadcast", "tree", 4), {"root": 4}, r"root=4 is out of range .* allowed: 0..3"),
    (("allreduce", "tree", 4), {"pieces": 0}, r"pieces=0 must be an int >= 1"),
])
def test_schedule_misuse_is_named(args, kwargs, message):
    with pytest.raises(ValueError, match=message):
        jaxcoll.schedule(*args, **kwargs)


def test_verify_needs_a_primitive():
    unlabelled = jaxcoll.Schedule.build("hand-made", 2, n_chunks=1,
                                        rounds=[[jaxcoll.Transfer(0, 1, 0, False)]])
    with pytest.raises(ValueError, match="names no primitive to verify against"):
        jaxcoll.verify(unlabelled)

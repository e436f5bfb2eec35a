"""Misuse gets a ValueError/TypeError from jaxcoll, naming the argument, before XLA sees it.

The misuse table of docs/sharp_bits.md is the list: every row is run here and must raise
exactly its error with exactly its message.
"""

import inspect
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, mesh

N = 4
SHARP_BITS = Path(__file__).parent.parent / "docs" / "sharp_bits.md"
ROW = re.compile(r"^\| (\d+) \| (.+?) \| (in shard_map|anywhere) \| `(.+?)` \| (\w+) \| `(.+)` \|$")
PUBLIC = ("allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce",
          "gather", "scatter", "schedule", "algorithms", "allgather_fold", "reduce_scatter_from",
          "allgather_matmul", "matmul_reduce_scatter", "allreduce_with_feedback",
          "ragged_alltoall")
NOT_IN_THE_TABLE = {"init"}  # arguments no row needs to misuse (any pytree is a fold's init)


def trace(fn, x):
    """Trace ``fn`` per rank on 4 ranks (no compile): errors surface at trace time."""
    per_rank = jax.shard_map(lambda b: fn(b[0])[None], mesh=mesh(N), in_specs=P(AXIS),
                             out_specs=P(AXIS))
    return jax.eval_shape(per_rank, jax.ShapeDtypeStruct((N, *x.shape), x.dtype))


def misuse_rows() -> list[tuple]:
    """(number, misuse, where, call, error name, message) of each row of the table."""
    return [match.groups() for line in SHARP_BITS.read_text().splitlines()
            if (match := ROW.match(line))]


def raised(where: str, call: str) -> BaseException:
    """The exception ``call`` raises, run inside shard_map (x: the rank's float32[3]) or as is."""
    names = {"jaxcoll": jaxcoll, "jax": jax, "jnp": jnp, "np": np, "lax": lax}
    with pytest.raises(Exception) as info:
        if where == "anywhere":
            eval(call, names)
        else:
            trace(lambda b: eval(call, {**names, "x": b}), jnp.zeros((3,), jnp.float32))
    return info.value


def message(error: BaseException) -> str:
    """The message without the note JAX appends when it filters its traceback."""
    return str(error).split("\n--------------------\n")[0]


@pytest.mark.parametrize("number, misuse, where, call, error, text", misuse_rows(),
                         ids=[f"{row[0]}-{row[1]}" for row in misuse_rows()])
def test_misuse_raises_as_documented(number, misuse, where, call, error, text):
    got = raised(where, call)
    assert type(got).__name__ == error and message(got) == text, (
        f"row {number} ({misuse}) of docs/sharp_bits.md: {type(got).__name__}: {message(got)}")


def test_the_table_covers_the_api():
    """At least 20 numbered rows; every public function and every argument of theirs
    (but NOT_IN_THE_TABLE) is misused in some row; every message starts with jaxcoll.<fn>
    (an unbound axis: after JAX's own words, as lax's collectives raise it)."""
    rows = misuse_rows()
    assert len(rows) >= 20
    assert [int(r[0]) for r in rows] == list(range(1, len(rows) + 1))
    messages = [re.sub(r"^unbound axis name: \w+\. ", "", r[5]) for r in rows]
    assert all(re.match(r"jaxcoll\.\w+: ", m) for m in messages)
    for fn in PUBLIC:
        assert any(m.startswith(f"jaxcoll.{fn}: ") for m in messages), fn
    arguments = {name for fn in PUBLIC for name in inspect.signature(getattr(jaxcoll, fn))
                 .parameters} - NOT_IN_THE_TABLE
    missing = {a for a in arguments if not any(re.search(rf"\b{a}(=| has )", m)
                                               for m in messages)}
    assert not missing, f"no row of docs/sharp_bits.md misuses {sorted(missing)}"


@pytest.mark.parametrize("call", [
    lambda b: jaxcoll.allreduce(b, AXIS, op=None),
    lambda b: jaxcoll.reduce(b, AXIS, op=None, algorithm="xla"),
    lambda b: jaxcoll.broadcast(b, AXIS, root=None),
    lambda b: jaxcoll.reduce(b, AXIS, root=None, algorithm="xla"),
], ids=["allreduce-op", "reduce-op-xla", "broadcast-root", "reduce-root-xla"])
def test_none_for_op_or_root_is_named(call):
    """None is a value like any other: named, not taken for 'this primitive has no op'."""
    with pytest.raises((TypeError, ValueError), match=r"^jaxcoll\.\w+: (op|root)=None"):
        trace(call, jnp.zeros((3,), jnp.float32))


def test_algorithms_lists_names():
    assert jaxcoll.algorithms("allreduce") == (
        "auto", "xla", "bidirectional_ring", "double_tree", "halving_doubling", "hierarchical",
        "naive", "recursive_doubling", "ring", "swing", "tree", "two_shot")
    assert jaxcoll.algorithms("alltoall") == ("auto", "xla", "bruck", "naive")


def test_verify_needs_a_primitive():
    unlabelled = jaxcoll.Schedule.build("hand-made", 2, n_chunks=1,
                                        rounds=[[jaxcoll.Transfer(0, 1, 0, False)]])
    with pytest.raises(ValueError, match="names no primitive to verify against"):
        jaxcoll.verify(unlabelled)

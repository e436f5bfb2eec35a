"""The path from ``jaxcoll.ring_allreduce`` to ``lax.ppermute``, measured as
docs/guide/path.md walks it: jaxcoll's own frames on the stack where the collective binds its
primitive (the call's half) and where the lowering rule calls ``ppermute`` (the lowering's
half). A ratchet: the counts may fall, never rise (the issue's goal is 10 frames in 3 files;
the page says how far it is)."""

import traceback

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, mesh
from jaxcoll.lowering import execute, primitives

CALL_FRAMES, LOWER_FRAMES, FILES = 8, 8, 6  # today's, as docs/guide/path.md lists them


def _jaxcoll_frames() -> list:
    return [frame for frame in traceback.extract_stack() if "/jaxcoll/" in frame.filename]


def path(monkeypatch) -> dict:
    """{"call": frames, "lowering": frames} of one jitted ring allreduce on 4 ranks."""
    seen = {}
    bind, ppermute = primitives._bind, lax.ppermute

    def bind_spy(*args, **kwargs):
        seen.setdefault("call", _jaxcoll_frames())
        return bind(*args, **kwargs)

    def ppermute_spy(*args, **kwargs):
        seen.setdefault("lowering", _jaxcoll_frames())
        return ppermute(*args, **kwargs)

    monkeypatch.setattr(primitives, "_bind", bind_spy)
    monkeypatch.setattr(execute.lax, "ppermute", ppermute_spy)
    run = jax.jit(jax.shard_map(lambda x: jaxcoll.ring_allreduce(x, AXIS), mesh=mesh(4),
                                in_specs=P(AXIS), out_specs=P(AXIS)))
    run(np.ones((4, 8), np.float32))
    return seen


def test_the_path_from_ring_allreduce_to_ppermute_does_not_grow(monkeypatch):
    seen = path(monkeypatch)
    files = {frame.filename.split("/jaxcoll/")[-1] for frames in seen.values()
             for frame in frames}
    assert seen["call"][0].name == "ring_allreduce" and seen["lowering"][-1].name == "permute"
    counts = (len(seen["call"]), len(seen["lowering"]), len(files))
    assert all(now <= bound for now, bound in zip(counts, (CALL_FRAMES, LOWER_FRAMES, FILES))), (
        counts, [(f.filename.split("/jaxcoll/")[-1], f.name)
                 for frames in seen.values() for f in frames])

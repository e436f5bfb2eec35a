"""The path from ``jaxcoll.ring_allreduce`` to ``lax.ppermute``, measured as
docs/guide/path.md walks it: jaxcoll's own frames on the stack where the collective binds its
primitive (the call's half) and where the lowering rule calls ``ppermute`` (the lowering's
half). The goal (issue 48): at most 10 frames in at most 3 files; the page lists today's, 9 in
3."""

import re
import traceback
from pathlib import Path

import jax
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

import jaxcoll
from helpers import AXIS, mesh
from jaxcoll.lowering import execute, primitives

GOAL_FRAMES, GOAL_FILES = 10, 3  # issue 48's, both halves together
CALL_FRAMES, LOWER_FRAMES, FILES = 4, 5, 3  # today's, as docs/guide/path.md lists them


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


def _named(frames) -> list:
    return [(frame.filename.split("/jaxcoll/")[-1], frame.name) for frame in frames]


def test_the_path_from_ring_allreduce_to_ppermute_is_short(monkeypatch):
    seen = path(monkeypatch)
    files = {file for frames in seen.values() for file, _ in _named(frames)}
    assert seen["call"][0].name == "ring_allreduce" and seen["lowering"][-1].name == "permute"
    counts = (len(seen["call"]), len(seen["lowering"]), len(files))
    shown = (counts, {half: _named(frames) for half, frames in seen.items()})
    assert counts[0] + counts[1] <= GOAL_FRAMES and counts[2] <= GOAL_FILES, shown


def test_the_page_lists_the_frames_of_the_path(monkeypatch):
    """docs/guide/path.md's two tables name exactly the frames measured, in order."""
    page = (Path(__file__).parents[1] / "docs/guide/path.md").read_text(encoding="utf-8")
    call, lowering = page.split("\n## The lowering", 1)
    row = re.compile(r"^\| `([^`]+)` \| `jaxcoll/([^`]+)` \|", re.MULTILINE)
    listed = {"call": [(file, name) for name, file in row.findall(call)],
              "lowering": [(file, name) for name, file in row.findall(lowering)]}
    assert listed == {half: _named(frames) for half, frames in path(monkeypatch).items()}
    files = {file for frames in listed.values() for file, _ in frames}
    assert (len(listed["call"]), len(listed["lowering"]), len(files)) == (
        CALL_FRAMES, LOWER_FRAMES, FILES)

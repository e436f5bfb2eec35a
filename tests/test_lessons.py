"""The notebooks' corrected lessons stay corrected: phrases a review found wrong (issue 50) must
not come back into a notebook's source.

Each phrase below was an error against the notebook's own printed output or the literature:
05's "The opposite" (the ring's bandwidth term, 2(n-1)/n·N per rank, is the optimum, so the
lecture's warning is misleading rather than backwards), 01's "gains about the number of cores"
(its own 2-core timings printed 1.6 to 3.5), 11's "hides behind nothing" (TP's backward dX
AllReduce can overlap the dW matmul) and 03's "in an order a rerun can change" (an explanation
of a timing that fits any outcome), 06's "DDP's buckets come out *slower*" across two nodes
(an artefact of pricing the ring lock-step in one channel: pipelined in NCCL's 8 channels the
overlap pays, as the notebook now prints), and 05's "The flat ring pays 2046 NIC start-ups"
(a lock-step executor's cost, given as the ring's at 1024 GPUs: NCCL's pipelined ring charges
network latency on 2·(nodes − 1) steps, and the notebook now prices the ring both ways).
"""

from pathlib import Path

import pytest

pytestmark = pytest.mark.jax_free

TUTORIALS = Path(__file__).resolve().parent.parent / "tutorials"
SOURCES = sorted(TUTORIALS.glob("[0-9][0-9]_*.py")) + [TUTORIALS / "README.md"]  # + the index

WRONG = [
    "The opposite",
    "gains about the number of cores",
    "hides behind nothing",
    "in an order a rerun can change",
    "DDP's buckets come out *slower*",  # 06: true of a lock-step, one-channel ring only
    "2046 NIC start-ups",  # 05: jaxcoll's lock-step ring, not what NCCL's ring pays
]


def test_there_are_sources():
    assert len(SOURCES) >= 12


@pytest.mark.parametrize("phrase", WRONG)
@pytest.mark.parametrize("source", SOURCES, ids=lambda path: path.stem)
def test_corrected_phrase_is_not_back(source, phrase):
    text = source.read_text(encoding="utf-8")
    assert phrase not in text, f"{source.name} says {phrase!r} again (issue 50)"

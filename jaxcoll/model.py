"""The α-β-γ cost model, read off a schedule: α per message, β per byte sent, γ per byte reduced.

Each ppermute the executor makes (one per matching of a round, see execute.py) costs
α + k·c·β (+ k·c·γ if it reduces), where c is the chunk size and k the most chunks any one
transfer of it moves. A schedule's predicted time is the sum over its ppermutes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .execute import split_round
from .schedules import Schedule


@dataclass(frozen=True)
class Cost:
    """Predicted seconds, and where they come from."""

    seconds: float
    messages: int  # ppermutes, one after another: each pays α
    bytes_sent: float  # by the busiest rank
    bytes_reduced: float  # by the busiest rank
    alpha: float
    beta: float
    gamma: float

    def __str__(self) -> str:
        return (f"{self.seconds * 1e6:.1f} us = {self.messages} x α + "
                f"{self.bytes_sent:.0f} B x β + {self.bytes_reduced:.0f} B x γ")


def cost(schedule: Schedule, nbytes: float, *, alpha: float, beta: float,
         gamma: float = 0.0) -> Cost:
    """Predicted time of ``schedule`` on a buffer of ``nbytes`` per rank.

    ``nbytes`` is the whole buffer one rank works on: the message for allreduce, broadcast and
    reduce; the input for reduce_scatter and scatter; the output for allgather and gather.
    """
    chunk = nbytes / schedule.n_chunks
    seconds, messages = 0.0, 0
    sent, reduced = Counter(), Counter()
    for round_ in schedule.rounds:
        for matching in split_round(round_):
            most = max(len(t.chunks) for t in matching) * chunk
            seconds += alpha + most * beta + (most * gamma if matching[0].reduce else 0.0)
            messages += 1
            for t in matching:
                sent[t.src] += len(t.chunks) * chunk
                if t.reduce:
                    reduced[t.dst] += len(t.chunks) * chunk
    return Cost(seconds, messages, max(sent.values(), default=0.0),
                max(reduced.values(), default=0.0), alpha, beta, gamma)

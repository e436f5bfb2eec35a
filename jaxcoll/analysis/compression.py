"""Compressed transfers and their error model (no JAX here; the codec is in codec.py).

A compressed collective runs the same schedule, but every transfer carries its chunks encoded
and the receiver decodes them into its float32 buffer before it adds or copies: the buffers,
and every sum, stay float32. The codecs:

- ``bf16``: the values rounded to bfloat16 (2 bytes each);
- ``int8``: blocks of ``block`` values, each block an int8 per value plus one float32 scale:
  x ≈ q·s, q = round(x / s) in [-127, 127];
- ``fp8``: the same blocks, q in float8 e4m3 (max 448).

A block holding an infinity or a NaN decodes to NaNs (int8, fp8; bfloat16 keeps them): nothing
non-finite turns silently into a finite value.

Scales are powers of two (as the OCP MX formats' shared exponents): s = 2^k, the smallest with
max|x| <= qmax·s, so max|x| / s is in (qmax/2, qmax]. Scaling is then exact, and encoding a
decoded block gives back the same values: a value that arrives by copy is sent on without any
new error, so an allgather quantizes each value once, at its source, whatever its schedule.

**Error model.** One encoding of a block whose largest magnitude is M errs by at most u·M per
value: u = 1/127 for int8 (half a step, s/2 < M/127), 2^-4 for fp8 (half an ulp of e4m3's 3
mantissa bits; its subnormals err by at most 2^-10·s, far less), 2^-8 for bfloat16. A
partial sum is quantized again each time it is sent after an add; a copy of a decoded value
adds nothing. :func:`quantizations` reads from the schedule how many times, at most, any
contribution to any result is quantized (``d``); every partial sum of a block has magnitude at
most ΣM = Σ_r M_r (M_r: rank r's largest input magnitude in that block) plus the errors so
far, so after d quantizations and float32 adds of n values

    ``|result - exact sum| <= ((1 + u)^d - 1 + n·2^-24·(1 + u)^d) · ΣM``   (:func:`error_bound`)

(plus d·2^-127 where a block is so small, below ~2^-119, that its scale stops at 2^-126).

The ring allreduce quantizes the travelling partial sum at each of its n-1 hops and the result
once more: d = n, error growing with n. ``two_shot`` (pairwise reduce-scatter: each value sent
once, straight to the owner of its chunk, which adds in float32; then a ring allgather of the
owner's result) quantizes each value at most twice: d = 2 for any n.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from jaxcoll.ir.records import RECORDS
from jaxcoll.ir.schedules import Schedule

KINDS = ("bf16", "fp8", "int8")
MIN_EXPONENT = -126  # scales are at least 2^-126 (normal floats): tiny blocks err <= 2^-127
DEFAULT_BLOCK = 128  # values per scale: int8 carries 1 + 4/128 bytes a value, 0.258x float32


@dataclass(frozen=True)
class Compress:
    """How transfers are compressed: an encoding, and the values that share a scale.

    ``kind`` in bf16, fp8, int8; ``block`` values share one float32 scale (fp8, int8). The
    buffers and every sum stay float32; the module's docstring gives the codecs and the error
    bound (:func:`error_bound`).

    Attributes:
      kind: "bf16", "fp8" or "int8": the values rounded to bfloat16, or each block as
        float8 e4m3 or int8 values times one power-of-two scale.
      block: values per float32 scale (fp8, int8; bf16 has no scale), default 128: int8
        then carries 1 + 4/128 bytes a value.

    Examples:
      >>> import jaxcoll
      >>> int8 = jaxcoll.Compress("int8")
      >>> int8.wire_bytes(1024)  # 1024 int8 values and 8 float32 scales
      1056
      >>> jaxcoll.Compress("bf16").wire_bytes(1024)
      2048
    """

    kind: str
    block: int = DEFAULT_BLOCK

    @property
    def qmax(self) -> float:
        """The largest encoded magnitude (int8 127, e4m3 448)."""
        return {"int8": 127.0, "fp8": 448.0, "bf16": float("inf")}[self.kind]

    @property
    def unit(self) -> float:
        """u: one encoding errs by at most u times the block's largest magnitude."""
        return {"int8": 1 / 127, "fp8": 2.0 ** -4, "bf16": 2.0 ** -8}[self.kind]

    @property
    def scaled(self) -> bool:
        return self.kind != "bf16"

    def wire_bytes(self, values: int) -> int:
        """Bytes a chunk of ``values`` float32 values takes on the wire."""
        if not self.scaled:
            return 2 * values
        blocks = -(-values // self.block)
        return blocks * self.block + 4 * blocks


def compress_arg(fn: str, compress) -> Compress | None:
    """``compress`` (None, a kind's name or a :class:`Compress`) checked, as a Compress.

    Args:
      fn: the name of the function it was passed to, for the error's message
        ("jaxcoll.{fn}: ...").
      compress: None, a kind's name ("bf16", "fp8", "int8") or a :class:`Compress`.

    Returns:
      None for None; a :class:`Compress` (a kind's name as ``Compress(kind)``, with the
      default block).

    Raises:
      ValueError: ``compress`` is none of these, or a :class:`Compress` whose ``block`` is not
        an int >= 1.
    """
    if compress is None or isinstance(compress, Compress) and compress.kind in KINDS:
        if compress is not None and not (isinstance(compress.block, (int, np.integer))
                                         and not isinstance(compress.block, bool)
                                         and compress.block >= 1):
            raise ValueError(f"jaxcoll.{fn}: compress={compress!r} needs block, the values "
                             "per scale, to be an int >= 1")
        return compress
    if isinstance(compress, str) and compress in KINDS:
        return Compress(compress)
    raise ValueError(f"jaxcoll.{fn}: compress={compress!r} is not one of None, "
                     f"{', '.join(KINDS)} (or jaxcoll.Compress(kind, block=...))")


@lru_cache(maxsize=512)
def quantizations(schedule: Schedule, settle: bool) -> int:
    """d: the most times any contribution to any rank's result is encoded on its way.

    A partial sum is encoded each time it is sent after an add; a sender keeps the decoded
    value it sent; a copied (decoded) value is sent on unchanged. ``settle``: the result is
    encoded once more at the end where it is not already a decoded value (allreduce and
    allgather, so every rank holds the same bits)."""
    n, chunks = schedule.n_ranks, schedule.n_chunks
    depth = np.zeros((n, chunks), int)  # encodings behind each rank's chunk
    decoded = np.zeros((n, chunks), bool)  # the chunk is a decoded value (re-encodes exactly)
    for round_ in schedule.rounds:
        new_depth, new_decoded = depth.copy(), decoded.copy()
        for t in round_:  # a sender keeps what it sent: the decoded value
            for src_chunk in t.chunks:
                new_depth[t.src, src_chunk] = depth[t.src, src_chunk] + (
                    0 if decoded[t.src, src_chunk] else 1)
                new_decoded[t.src, src_chunk] = True
        kept = new_depth.copy()
        for t in round_:
            for src_chunk, dst_chunk in zip(t.chunks, t.into):
                sent = kept[t.src, src_chunk]
                if t.reduce:
                    new_depth[t.dst, dst_chunk] = max(new_depth[t.dst, dst_chunk], sent)
                    new_decoded[t.dst, dst_chunk] = False
                else:
                    new_depth[t.dst, dst_chunk] = sent
                    new_decoded[t.dst, dst_chunk] = True
        depth, decoded = new_depth, new_decoded
    if settle and schedule.rounds:
        depth = depth + ~decoded
    return int(depth.max(initial=0))


def error_bound(compress: Compress, d: int, n: int, total_max):
    """The most ``|result - exact sum|`` can be, given ΣM (module docstring).

    Args:
      compress: the :class:`Compress` (its u: :attr:`Compress.unit`).
      d: the most times any contribution is quantized (:func:`quantizations`).
      n: the number of values summed (ranks).
      total_max: ΣM, the sum over ranks of the largest magnitude in the block: a number or an
        array.

    Returns:
      ((1 + u)^d - 1 + n·2^-24·(1 + u)^d)·ΣM, plus d·2^-127 for blocks so small that their
      scale stops at 2^-126 (fp8, int8): a number, or an array of ``total_max``'s shape.
    """
    grown = (1 + compress.unit) ** d
    floor = d * 2.0 ** (MIN_EXPONENT - 1) * grown if compress.scaled else 0.0
    return (grown - 1 + n * 2.0 ** -24 * grown) * total_max + floor


def sum_of_block_maxima(x: np.ndarray, n_chunks: int, block: int, rows: int = 1) -> np.ndarray:
    """ΣM for every value of a collective's buffer.

    Args:
      x: (ranks, rows·width) array: each rank's buffer of ``rows`` rows.
      n_chunks: the schedule's chunks: it cuts each row into n_chunks // rows chunks
        (zero-padded).
      block: values per scale: each chunk is cut into blocks of ``block``.
      rows: the rows of each rank's buffer.

    Returns:
      A (rows·width,) array, for each value the sum over ranks of the largest magnitude in
      its block.
    """
    ranks, total = x.shape
    width, per_row = total // rows, n_chunks // rows
    chunk = -(-width // per_row)
    blocks = -(-chunk // block)
    padded = np.zeros((ranks, rows, per_row * chunk))
    padded[:, :, :width] = np.abs(x).reshape(ranks, rows, width)
    padded = np.pad(padded.reshape(ranks, rows, per_row, chunk),
                    ((0, 0), (0, 0), (0, 0), (0, blocks * block - chunk)))
    maxima = padded.reshape(ranks, rows, per_row, blocks, block).max(axis=4).sum(axis=0)
    per_value = np.repeat(maxima, block, axis=2)[..., :chunk]  # (rows, per_row, chunk)
    return per_value.reshape(rows, -1)[:, :width].reshape(-1)


def result_bound(compress: Compress, schedule: Schedule, x: np.ndarray) -> np.ndarray:
    """The error bound on every value of a compressed allreduce, reduce_scatter or allgather.

    Args:
      compress: the :class:`Compress` its transfers use.
      schedule: the :class:`~jaxcoll.ir.schedules.Schedule` it runs by: an allreduce,
        reduce_scatter (tiled) or allgather.
      x: (ranks, values) array: each rank's input.

    Returns:
      The bound on every value, flat, in the result's order (allreduce (values,);
      reduce_scatter (values,), rank r's block at r·values/n; allgather (ranks·values,)).
    """
    n, record = schedule.n_ranks, RECORDS[schedule.collective]
    # an owner's input is its row of the buffer: rank r's values are row r of one buffer
    buffers = x.reshape(1, -1) if record.source == "owner" else x
    rows = record.rows("schedule_blocks", n)
    total_max = sum_of_block_maxima(buffers, schedule.n_chunks, compress.block, rows)
    d = quantizations(schedule, record.replicated)
    return error_bound(compress, d, n, total_max)

"""Encoding float32 chunks for the wire and back (compression.py says what and why).

``encode`` turns an (m, length) float32 array into one (m, wire) array that a single
``ppermute`` carries: bfloat16 values as their bits (int16: sent as bfloat16, XLA's CPU
pipeline moves the convert past the collective-permute and sends float32), or for int8 and fp8
the blocks' bytes followed by their float32 scales' bytes (int8). ``decode`` inverts it;
``roundtrip`` is both.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax

from jaxcoll.analysis.compression import MIN_EXPONENT, Compress


def _power_of_two(k):
    """2^k as float32, exactly, for integer k in [-126, 127] (built from its exponent bits)."""
    return lax.bitcast_convert_type(((k + 127) << 23).astype(jnp.int32), jnp.float32)


def _scales(amax, qmax: float):
    """(s, 1/s): s = 2^k the smallest power of two with amax <= qmax·s, at least 2^-126; NaN
    where amax is not finite, so that the block decodes to NaN (amax: (m, blocks))."""
    bits = lax.bitcast_convert_type(amax, jnp.int32)
    e = ((bits >> 23) & 0xFF) - 126  # amax = f·2^e, f in [0.5, 1) (normal amax)
    top = int(math.floor(math.log2(qmax))) + 1  # qmax < 2^top
    # amax / 2^k = f·2^top in [2^(top-1), 2^top); at least 2^-126 (a normal float) for tiny blocks
    k = jnp.clip(e - top, MIN_EXPONENT, 127)
    k = jnp.where(amax * _power_of_two(-k) > qmax, k + 1, k)
    finite = jnp.isfinite(amax)
    return jnp.where(finite, _power_of_two(k), jnp.nan), _power_of_two(-k)


def _blocks(chunks, block: int):
    """(m, length) -> (m, blocks, block), zero-padded."""
    m, length = chunks.shape
    blocks = -(-length // block)
    return jnp.pad(chunks, ((0, 0), (0, blocks * block - length))).reshape(m, blocks, block)


def encode(compress: Compress, chunks):
    """(m, length) float32 -> (m, wire): what one transfer of these chunks carries."""
    if not compress.scaled:  # as bits: XLA would move a bfloat16 convert past the transfer
        return lax.bitcast_convert_type(chunks.astype(jnp.bfloat16), jnp.int16)
    blocks = _blocks(chunks, compress.block)  # (m, blocks, block)
    scale, inverse = _scales(jnp.max(jnp.abs(blocks), axis=2), compress.qmax)  # (m, blocks)
    scaled = jnp.clip(blocks * inverse[..., None], -compress.qmax, compress.qmax)  # exact
    if compress.kind == "int8":
        payload = jnp.round(scaled).astype(jnp.int8)
    else:
        payload = lax.bitcast_convert_type(scaled.astype(jnp.float8_e4m3fn), jnp.int8)
    scale = lax.bitcast_convert_type(scale, jnp.int8)  # (m, blocks, 4)
    m = chunks.shape[0]
    return jnp.concatenate([payload.reshape(m, -1), scale.reshape(m, -1)], axis=1)


def decode(compress: Compress, wire, length: int):
    """(m, wire) -> (m, length) float32."""
    if not compress.scaled:
        return lax.bitcast_convert_type(wire, jnp.bfloat16).astype(jnp.float32)
    m, blocks = wire.shape[0], -(-length // compress.block)
    payload = wire[:, :blocks * compress.block].reshape(m, blocks, compress.block)
    scale = lax.bitcast_convert_type(
        wire[:, blocks * compress.block:].reshape(m, blocks, 4), jnp.float32)  # (m, blocks)
    if compress.kind == "int8":
        values = payload.astype(jnp.float32)
    else:
        values = lax.bitcast_convert_type(payload, jnp.float8_e4m3fn).astype(jnp.float32)
    return (values * scale[..., None]).reshape(m, -1)[:, :length]


def roundtrip(compress: Compress, chunks):
    """decode(encode(chunks)): the values a receiver gets."""
    return decode(compress, encode(compress, chunks), chunks.shape[1])

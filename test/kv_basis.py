"""The Hadamard basis a q8_0 KV cache stores keys and values in (src/kv_cache/hadamard.hpp), in
numpy for the tests that read or write a q8_0 cache's bytes: the same butterflies in float32 in
the same order as the library, so a rotated row is bit-identical to the one it stores."""

from __future__ import annotations

import numpy as np


def key_rotation(head_dim: int) -> int:
    return head_dim & -head_dim  # the largest power of two dividing head_dim


def value_rotation(head_dim: int) -> int:
    return 64 if head_dim % 64 == 0 else key_rotation(head_dim)


def hadamard(x: np.ndarray, block: int) -> np.ndarray:
    """x [..., width] (width a multiple of block) rotated by Sylvester's H / sqrt(block), block
    values at a time; float32, as the library computes it. H is its own inverse."""
    x = np.ascontiguousarray(x, np.float32)
    shape = x.shape
    y = x.reshape(-1, block)
    h = 1
    while h < block:
        y = y.reshape(-1, block // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = np.stack([a + b, a - b], axis=2)
        h *= 2
    scale = np.float32(1.0) / np.sqrt(np.float32(block))
    return (y.reshape(shape) * scale).astype(np.float32)

"""The file format of the prompt cache's disk tier: one KV block per file.

A file is a fixed header, the block's token ids, then the payload (the block's K and V of every
layer as llaisysKVCacheBlockRead lays them out). Every header field is compared with what the
reader expects before the payload is used, and the payload's CRC-32 is checked: a file from
another model, KV dtype, layout, block size, library or format version, or for other tokens, is
refused (``FileRefused`` says which field); a short or corrupt file is refused too. The caller
counts a refusal as a miss and logs it.

    offset size  field
    0      8     magic b"LLKVBLK\\0"
    8      4     format version (FORMAT_VERSION)
    12     32    library version (llaisysVersion, UTF-8, NUL padded)
    44     32    model identity (BlockSpec.model_id: config, weights' names/sizes/mtimes, dtype, device)
    76     4     KV dtype (llaisysDataType_t)
    80     4     layout (llaisysKVLayout_t; 0 = BLOCK, the only one stored)
    84     4     block size (tokens)
    88     4     layers
    92     4     KV heads
    96     4     head dim
    100    8     payload bytes
    108    32    block hash (the prefix cache's chained SHA-256)
    140    32    parent block hash (zeros for the first block)
    172    1     1 when there is a parent block
    173    3     zero
    176    4     CRC-32 of the payload
    180    4     zero
    184    8*bs  token ids (int64 LE)
    ...          payload [n_layers][K, V][block_size, n_kv_heads, head_dim] in the KV dtype
All integers are little-endian.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

MAGIC = b"LLKVBLK\0"
# 2: q8_0 payloads hold keys and values in the KV cache's Hadamard basis (kv_cache/hadamard.hpp);
# a version-1 q8_0 file read as version 2 would give wrong attention, so every older file is refused.
FORMAT_VERSION = 2
_HEAD = struct.Struct("<8sI32s32sIIIIIIQ32s32sB3xI4x")
HEAD_BYTES = _HEAD.size  # 184
SUFFIX = ".kvb"


class FileRefused(Exception):
    """A block file that must not be used; the message names the field."""


@dataclass(frozen=True)
class BlockSpec:
    """What every file of one engine's cache must match (its header's fixed fields)."""

    lib_version: str  # llaisys.__version__
    model_id: bytes  # 32 bytes: the model's identity (prompt_cache.model_identity)
    kv_dtype: int  # llaisysDataType_t of the KV cache
    block_size: int  # tokens per block
    n_layers: int
    n_kv_heads: int
    head_dim: int
    payload_bytes: int  # llaisysKVCacheBlockBytes
    layout: int = 0  # llaisysKVLayout_t: BLOCK

    @property
    def file_bytes(self) -> int:
        return HEAD_BYTES + 8 * self.block_size + self.payload_bytes

    @property
    def prefix(self) -> str:
        """The file-name prefix of this spec's files (8 bytes of a hash over its fixed fields)."""
        return hashlib.sha256(self.head_fields()).hexdigest()[:16]

    def head_fields(self) -> bytes:
        return _HEAD.pack(MAGIC, FORMAT_VERSION, self._lib(), self.model_id, self.kv_dtype, self.layout,
                          self.block_size, self.n_layers, self.n_kv_heads, self.head_dim, self.payload_bytes,
                          b"", b"", 0, 0)

    def _lib(self) -> bytes:
        return self.lib_version.encode()[:32]

    def file_name(self, block_hash: bytes) -> str:
        return f"{self.prefix}-{block_hash.hex()}{SUFFIX}"


def encode(spec: BlockSpec, block_hash: bytes, parent_hash: Optional[bytes], token_ids: Sequence[int],
           payload: bytes) -> bytes:
    """The whole file: header, token ids, payload."""
    assert len(payload) == spec.payload_bytes and len(token_ids) == spec.block_size
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, spec._lib(), spec.model_id, spec.kv_dtype, spec.layout,
                      spec.block_size, spec.n_layers, spec.n_kv_heads, spec.head_dim, spec.payload_bytes,
                      block_hash, parent_hash or b"", 1 if parent_hash is not None else 0,
                      zlib.crc32(payload))
    return head + np.asarray(token_ids, dtype="<i8").tobytes() + payload


def decode(spec: BlockSpec, data: bytes, block_hash: bytes, parent_hash: Optional[bytes],
           token_ids: Sequence[int]) -> memoryview:
    """The payload of a file's bytes if they hold this block for this spec, else FileRefused."""
    if len(data) < HEAD_BYTES:
        raise FileRefused(f"truncated: {len(data)} bytes, shorter than the {HEAD_BYTES}-byte header")
    (magic, version, lib, model_id, kv_dtype, layout, block_size, n_layers, n_kv_heads, head_dim, payload_bytes,
     h, parent, has_parent, crc) = _HEAD.unpack_from(data)
    if magic != MAGIC:
        raise FileRefused(f"not a KV block file (magic {magic!r})")
    expect = [("format version", version, FORMAT_VERSION), ("library version", lib, spec._lib().ljust(32, b"\0")),
              ("model identity", model_id, spec.model_id), ("KV dtype", kv_dtype, spec.kv_dtype),
              ("layout", layout, spec.layout), ("block size", block_size, spec.block_size),
              ("layers", n_layers, spec.n_layers), ("KV heads", n_kv_heads, spec.n_kv_heads),
              ("head dim", head_dim, spec.head_dim), ("payload bytes", payload_bytes, spec.payload_bytes),
              ("block hash", h, block_hash), ("parent hash", (has_parent, parent),
                                              (1, parent_hash) if parent_hash is not None else (0, b"\0" * 32))]
    for field, got, want in expect:
        if got != want:
            shown = (lambda v: v.hex()[:16] if isinstance(v, bytes) else v)  # noqa: E731
            raise FileRefused(f"{field} differs (file {shown(got)!r}, expected {shown(want)!r})")
    if len(data) != spec.file_bytes:
        raise FileRefused(f"truncated or padded: {len(data)} bytes, a block file has {spec.file_bytes}")
    tokens = np.frombuffer(data, dtype="<i8", count=spec.block_size, offset=HEAD_BYTES)
    if not np.array_equal(tokens, np.asarray(token_ids, dtype=np.int64)):
        raise FileRefused("token ids differ (hash collision or a corrupt header)")
    payload = memoryview(data)[HEAD_BYTES + 8 * spec.block_size:]
    if zlib.crc32(payload) != crc:
        raise FileRefused("payload checksum differs (corrupt file)")
    return payload

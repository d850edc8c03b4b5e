"""KVCache: the core's K/V storage in the BLOCK (paged) or SLOT (unified cells) layout."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from .dtypes import as_dtype
from .libllaisys import LIB, DataType, DeviceType, check, error_for, last_error
from .libllaisys.kv_cache import MAX_SEQS, KVCacheParams, KVCacheStats, KVLayout, llaisysKVCache_t
from .owned import OwnedHandle


@dataclass(frozen=True)
class KVStats:
    layout: KVLayout
    capacity: int  # token slots
    used: int  # SLOT: cells owned by a sequence; BLOCK: 0 (the block manager counts)
    free: int
    bytes: int  # bytes of K and V storage
    block_size: int


def as_layout(layout: "KVLayout | str") -> KVLayout:
    if isinstance(layout, KVLayout):
        return layout
    try:
        return KVLayout[str(layout).upper()]
    except KeyError:
        raise ValueError(f"unknown KV layout {layout!r}; expected 'block' or 'slot'") from None


class KVCache(OwnedHandle):
    """Owns a core KV cache handle: one a model made (Model.create_kv_cache()), or a
    standalone one from KVCache.create()."""

    _DESTROY = "llaisysKVCacheDestroy"

    def __init__(self, handle: int, layout: KVLayout):
        self._handle = None
        if not handle:
            raise error_for(LIB.llaisysGetLastStatus(), last_error())
        self._handle = handle
        self.layout = layout

    @classmethod
    def create(cls, layout: "KVLayout | str", dtype: "DataType | str", n_layers: int, n_kv_heads: int,
               head_dim: int, n_slots: int, block_size: int = 16, rope_theta: float = 10000.0,
               device: DeviceType = DeviceType.CPU, device_id: int = 0) -> "KVCache":
        """A cache of n_slots token slots for n_layers layers of [n_kv_heads, head_dim] keys and
        values (llaisysKVCacheCreate2); rope_theta is what SLOT seq_add re-rotates keys with."""
        lay = as_layout(layout)
        for name, v in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                        ("n_slots", n_slots), ("block_size", block_size)):
            if int(v) < 0:
                raise ValueError(f"{name} {v} is negative")
        params = KVCacheParams(layout=int(lay), dtype=int(as_dtype(dtype)), n_layers=n_layers,
                               n_kv_heads=n_kv_heads, head_dim=head_dim, n_slots=n_slots, block_size=block_size,
                               rope_theta=rope_theta, device=int(device), device_id=device_id)
        out = llaisysKVCache_t()
        check(LIB.llaisysKVCacheCreate2(ctypes.byref(params), ctypes.byref(out)))
        return cls(out.value, lay)

    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("KV cache is closed")
        return self._handle

    def stats(self) -> KVStats:
        s = KVCacheStats()
        check(LIB.llaisysKVCacheGetStats(self.handle, ctypes.byref(s)))
        return KVStats(KVLayout(s.layout), s.capacity, s.used, s.free, s.bytes, s.block_size)

    def clear(self) -> None:
        check(LIB.llaisysKVCacheClear(self.handle))

    # -- BLOCK layout: one block's K and V to and from host memory (the prompt cache's disk tier)
    def block_bytes(self) -> int:
        """Bytes of one block's K and V over all layers (llaisysKVCacheBlockBytes)."""
        out = ctypes.c_size_t()
        check(LIB.llaisysKVCacheBlockBytes(self.handle, ctypes.byref(out)))
        return out.value

    def read_block(self, block: int) -> bytearray:
        """A copy of block `block`: [n_layers][K, V][block_size, n_kv_heads, head_dim] in the
        cache's dtype."""
        buf = bytearray(self.block_bytes())
        arr = np.frombuffer(buf, np.uint8)  # a view: the core writes into buf
        check(LIB.llaisysKVCacheBlockRead(self.handle, block, arr.ctypes.data, arr.nbytes))
        return buf

    def write_block(self, block: int, data) -> None:
        """Overwrite block `block` with `data` (a bytes-like object laid out as read_block's)."""
        arr = np.frombuffer(data, np.uint8)
        check(LIB.llaisysKVCacheBlockWrite(self.handle, block, arr.ctypes.data, arr.nbytes))

    def copy_shift(self, src_slots, dst_slots, deltas) -> None:
        """BLOCK: slot dst_slots[i] of every layer gets slot src_slots[i]'s V and its K re-rotated
        by deltas[i] positions (llaisysKVCacheCopyShift; cache reuse). Equal lengths, or ValueError."""
        src = np.ascontiguousarray(src_slots, np.int32)
        dst = np.ascontiguousarray(dst_slots, np.int32)
        delta = np.ascontiguousarray(deltas, np.int64)
        if not src.ndim == dst.ndim == delta.ndim == 1 or not len(src) == len(dst) == len(delta):
            raise ValueError(f"copy_shift needs three 1-D arrays of one length, got shapes {src.shape}, "
                             f"{dst.shape} and {delta.shape}")
        check(LIB.llaisysKVCacheCopyShift(self.handle, len(src), src.ctypes.data, dst.ctypes.data, delta.ctypes.data))

    # -- SLOT layout sequence operations (llama.cpp's llama_memory_seq_*) ----------------
    @staticmethod
    def _seq(seq: int, allow_all: bool = False) -> int:
        if allow_all and seq == -1:
            return seq
        if not 0 <= seq < MAX_SEQS:
            raise ValueError(f"seq id {seq} is outside [0, {MAX_SEQS})")
        return seq

    def seq_rm(self, seq: int, p0: int = 0, p1: int = -1) -> None:
        """Forget positions [p0, p1) of seq (-1: every seq; p1 < 0: to the end)."""
        check(LIB.llaisysKVCacheSeqRm(self.handle, self._seq(seq, True), p0, p1))

    def seq_cp(self, src: int, dst: int, p0: int = 0, p1: int = -1) -> None:
        """Let dst share src's cells in [p0, p1) without copying K/V."""
        check(LIB.llaisysKVCacheSeqCp(self.handle, self._seq(src), self._seq(dst), p0, p1))

    def seq_keep(self, seq: int) -> None:
        check(LIB.llaisysKVCacheSeqKeep(self.handle, self._seq(seq)))

    def seq_add(self, seq: int, p0: int, p1: int, delta: int) -> None:
        """Shift seq's positions in [p0, p1) by delta (keys are re-rotated)."""
        check(LIB.llaisysKVCacheSeqAdd(self.handle, self._seq(seq), p0, p1, delta))

    def seq_pos_max(self, seq: int) -> int:
        out = ctypes.c_int64()
        check(LIB.llaisysKVCacheSeqPosMax(self.handle, self._seq(seq), ctypes.byref(out)))
        return out.value

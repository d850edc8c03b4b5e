"""Validate the structure of a GGUF file before anything else reads it.

The `gguf` package's reader trusts the counts, lengths and type ids it reads: an array
claiming 2**60 items in a short file makes it loop without end, a nested array makes it
recurse, an unknown type id raises whatever Python raises. `check_gguf` walks the same
layout with every number bounded by what the file can hold, and raises a ModelFileError
naming the file and the field (the header entry, metadata key or tensor) otherwise.
`read_gguf` is the same walk keeping what it reads: the metadata values and the tensor infos,
in about a second for a 150k-token vocabulary (gguf.GGUFReader takes 30-100 s on the same file),
with the tensor data memory-mapped, not read.

Layout (little-endian, versions 2 and 3): magic "GGUF", u32 version, u64 tensor count,
u64 metadata count; the metadata (string key, u32 type, value); the tensor infos (string
name, u32 n_dims, u64 dims[n_dims] innermost first, u32 type, u64 offset); padding to
`general.alignment` (default 32); the tensor data, each tensor at its offset.
"""

import mmap
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Union

import gguf
import numpy as np

from .files import ModelFileError

MAX_TENSORS = 1 << 16  # tensors in one file (a Qwen2 GGUF holds ~300, the largest models a few thousand)
MAX_KV = 1 << 16  # metadata entries (a Qwen2 GGUF holds ~30)
MAX_NAME = 256  # bytes in a tensor name or a metadata key (llama.cpp allows 64 for tensor names)
MAX_DIMS = 4  # dimensions of one tensor (GGML_MAX_DIMS)
MAX_ALIGNMENT = 1 << 16

# value type id -> (struct format, byte size) for scalars; 8 = string, 9 = array
_SCALARS = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4), 6: ("<f", 4),
            7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}
_STRING, _ARRAY = 8, 9
_NUMPY = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "?", 10: "<u8", 11: "<i8",
          12: "<f8"}  # scalar value type id -> numpy dtype of an array of them


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's entry in the GGUF tensor table, checked against the file."""

    name: str  # GGUF name, e.g. "blk.0.attn_q.weight"
    dims: tuple  # GGUF order, innermost (contiguous) first: a [out, in] matrix is (in, out)
    type_id: int  # GGML type id (gguf.GGMLQuantizationType)
    offset: int  # byte offset of its data from the start of the data section
    n_bytes: int  # bytes of its data: elements / block size * block bytes

    @property
    def shape(self) -> tuple:
        """The row-major element shape, outermost first (a matrix: (out, in))."""
        return tuple(reversed(self.dims))


class _Field:
    """The value of one metadata entry, with the `contents()` of gguf.ReaderField."""

    def __init__(self, value):
        self.value = value  # int, float, bool, str, or a list of them

    def contents(self):
        return self.value


@dataclass
class GGUFFile:
    """A GGUF file read by read_gguf: metadata values, tensor infos, and where the data starts."""

    path: Path
    metadata: dict = field(default_factory=dict)  # key -> int | float | bool | str | list
    tensors: list = field(default_factory=list)  # [TensorInfo] in file order
    data_start: int = 0  # byte offset of the tensor data section in the file
    size: int = 0  # bytes of the file

    @property
    def fields(self) -> dict:
        """key -> an object whose contents() is the value (what gguf_tokenizer.metadata reads)."""
        return {k: _Field(v) for k, v in self.metadata.items()}

    def tensor_bytes(self, info: TensorInfo) -> np.ndarray:
        """uint8 [n_bytes] of `info`'s data, memory-mapped read-only (nothing is read yet)."""
        return np.memmap(self.path, dtype=np.uint8, mode="r", offset=self.data_start + info.offset,
                         shape=(info.n_bytes,)) if info.n_bytes else np.zeros(0, np.uint8)


class _Cursor:
    """Bounded reads from the mapped file; running past the end is a ModelFileError."""

    def __init__(self, path: Path, buf):
        self.path, self.buf, self.pos, self.size = path, buf, 0, len(buf)

    def fail(self, field: str, message: str):
        raise ModelFileError(self.path, field, f"{field}: {message} (at byte {self.pos})")

    def take(self, n: int, field: str) -> int:
        """Advance over n bytes; returns where they start."""
        if n < 0 or n > self.size - self.pos:
            self.fail(field, f"needs {n} bytes but the file ends {self.size - self.pos} bytes later (truncated?)")
        start, self.pos = self.pos, self.pos + n
        return start

    def unpack(self, fmt: str, n: int, field: str):
        return struct.unpack_from(fmt, self.buf, self.take(n, field))[0]

    def string(self, field: str, limit: int = None) -> str:
        n = self.unpack("<Q", 8, field)
        if limit is not None and n > limit:
            self.fail(field, f"string of {n} bytes (at most {limit})")
        start = self.take(n, field)
        try:
            return bytes(self.buf[start:start + n]).decode("utf-8")
        except UnicodeDecodeError:
            self.fail(field, "string is not valid UTF-8")

    def strings(self, count: int, field: str, keep: bool) -> Optional[list]:
        out = [] if keep else None
        for i in range(count):
            n = self.unpack("<Q", 8, field)
            start = self.take(n, field)
            try:
                text = bytes(self.buf[start:start + n]).decode("utf-8")
            except UnicodeDecodeError:
                self.fail(field, f"item {i} is not valid UTF-8")
            if keep:
                out.append(text)
        return out


def _value(cur: _Cursor, vtype: int, key: str, keep: bool = False):
    """Read one metadata value; returns scalars, and strings and arrays when `keep` (else None)."""
    if vtype in _SCALARS:
        fmt, n = _SCALARS[vtype]
        return cur.unpack(fmt, n, key)
    if vtype == _STRING:
        text = cur.string(key)
        return text if keep else None
    if vtype != _ARRAY:
        cur.fail(key, f"unknown value type id {vtype}")
    itype = cur.unpack("<I", 4, key)
    count = cur.unpack("<Q", 8, key)
    if itype == _ARRAY:
        cur.fail(key, "arrays of arrays are not supported")
    if itype == _STRING:
        if count > (cur.size - cur.pos) // 8:
            cur.fail(key, f"array of {count} strings cannot fit in the rest of the file")
        return cur.strings(count, key, keep)
    if itype not in _SCALARS:
        cur.fail(key, f"array of unknown value type id {itype}")
    start = cur.take(count * _SCALARS[itype][1], key)  # bounded by the file before anything is sized
    if not keep:
        return None
    return np.frombuffer(cur.buf, dtype=_NUMPY[itype], count=count, offset=start).tolist()


def _header(cur: _Cursor) -> tuple:
    start = cur.take(4, "magic")
    magic = bytes(cur.buf[start:start + 4])
    if magic != b"GGUF":
        cur.fail("magic", f"not a GGUF file (magic {magic!r})")
    version = cur.unpack("<I", 4, "version")
    if version not in (2, 3):
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        cur.fail("version", "big-endian GGUF files are not supported" if swapped in (2, 3)
                 else f"GGUF version {version} is not supported (need 2 or 3)")
    n_tensors = cur.unpack("<Q", 8, "tensor_count")
    n_kv = cur.unpack("<Q", 8, "kv_count")
    # a metadata entry takes at least 13 bytes, a tensor info at least 28
    if n_kv > MAX_KV or n_kv * 13 > cur.size:
        cur.fail("kv_count", f"{n_kv} metadata entries (at most {MAX_KV}, and what the file can hold)")
    if n_tensors > MAX_TENSORS or n_tensors * 28 > cur.size:
        cur.fail("tensor_count", f"{n_tensors} tensors (at most {MAX_TENSORS}, and what the file can hold)")
    return n_tensors, n_kv


def _metadata(cur: _Cursor, n_kv: int, keep: bool) -> tuple:
    """Walk the metadata; returns (alignment, {key: value} when `keep`, else {})."""
    values, alignment = {}, 32
    seen = set()
    for i in range(n_kv):
        key = cur.string(f"metadata entry {i} key", MAX_NAME)
        if key in seen:
            cur.fail(key, "duplicate metadata key")
        seen.add(key)
        vtype = cur.unpack("<I", 4, key)
        value = _value(cur, vtype, key, keep)
        if key == "general.alignment":
            if vtype != 4 or not 0 < value <= MAX_ALIGNMENT or value & (value - 1):
                cur.fail(key, f"must be a u32 power of two up to {MAX_ALIGNMENT}, got {value!r} (type {vtype})")
            alignment = value
        if keep:
            values[key] = value
    return alignment, values


def _tensor_infos(cur: _Cursor, n_tensors: int) -> list:
    """[TensorInfo] after checking dims and types."""
    infos, names = [], set()
    for i in range(n_tensors):
        name = cur.string(f"tensor {i} name", MAX_NAME)
        if name in names:
            cur.fail(name, "duplicate tensor name")
        names.add(name)
        n_dims = cur.unpack("<I", 4, name)
        if not 1 <= n_dims <= MAX_DIMS:
            cur.fail(name, f"n_dims {n_dims} (need 1 to {MAX_DIMS})")
        dims = struct.unpack_from(f"<{n_dims}Q", cur.buf, cur.take(8 * n_dims, name))
        type_id = cur.unpack("<I", 4, name)
        offset = cur.unpack("<Q", 8, name)
        try:
            qtype = gguf.GGMLQuantizationType(type_id)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
        except (ValueError, KeyError):
            cur.fail(name, f"unknown tensor type id {type_id}")
        n_elems = 1
        for d in dims:
            n_elems *= d
        if min(dims) < 1 or n_elems >= 1 << 62:
            cur.fail(name, f"shape {list(dims)} is empty or too large")
        if dims[0] % block:
            cur.fail(name, f"first dimension {dims[0]} is not a multiple of the {qtype.name} block size {block}")
        infos.append(TensorInfo(name, tuple(dims), type_id, offset, n_elems // block * type_size))
    return infos


def check_gguf(path: Union[str, os.PathLike]) -> None:
    """Raise ModelFileError unless `path` is a structurally sound little-endian GGUF v2/v3 file."""
    _walk(Path(path), keep=False)


def read_gguf(path: Union[str, os.PathLike]) -> GGUFFile:
    """The metadata and tensor table of `path`, checked as check_gguf checks (ModelFileError otherwise)."""
    return _walk(Path(path), keep=True)


def _walk(path: Path, keep: bool) -> GGUFFile:
    if not path.is_file():
        raise ModelFileError(path, None, "GGUF file does not exist" if not path.exists() else "not a regular file")
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < 24:
            raise ModelFileError(path, "header", f"header: not a GGUF file (only {size} bytes)")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            cur = _Cursor(path, memoryview(buf))
            try:
                n_tensors, n_kv = _header(cur)
                alignment, values = _metadata(cur, n_kv, keep)
                infos = _tensor_infos(cur, n_tensors)
            finally:
                cur.buf.release()
    data_start = -(-cur.pos // alignment) * alignment
    last_end, last_name = 0, None  # the furthest end so far, and whose it is
    for name, n_bytes, offset in sorted(((t.name, t.n_bytes, t.offset) for t in infos), key=lambda t: t[2]):
        if offset % alignment:
            raise ModelFileError(path, name, f"{name}: data offset {offset} is not a multiple of the alignment {alignment}")
        if data_start + offset + n_bytes > size:
            raise ModelFileError(path, name, f"{name}: its {n_bytes} bytes at offset {offset} run past the end of "
                                             f"the file ({size - data_start} bytes of tensor data; truncated?)")
        if offset < last_end and n_bytes:
            raise ModelFileError(path, name, f"{name}: its data overlaps tensor {last_name!r}")
        if offset + n_bytes > last_end:
            last_end, last_name = offset + n_bytes, name
    return GGUFFile(path, values, infos, data_start, size)

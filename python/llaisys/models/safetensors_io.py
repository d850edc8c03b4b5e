"""Our own safetensors reader and writer (numpy only).

File layout: 8-byte little-endian header length N, N bytes of UTF-8 JSON
``{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}``,
then the data region; offsets are relative to the start of the data region.

The reader validates the whole header before handing out anything and returns
zero-copy, read-only numpy views into a memory map of the file. bf16 has no
numpy dtype, so it is carried as uint16 bit patterns with the tag "bf16".
"""

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, Union

import numpy as np

from .files import ModelFileError, loads_json

# A Qwen2 checkpoint holds 12 tensors per layer (~1,000 for 80 layers, a ~150 KB header); the
# official library allows 100 MB headers, which take tens of seconds to parse as JSON.
MAX_HEADER_BYTES = 16 << 20
MAX_TENSORS = 1 << 16  # tensors in one file
MAX_NDIM = 8  # dimensions of one tensor (a Qwen2 checkpoint uses 1 and 2)
MAX_DIM = (1 << 63) - 1  # one dimension: what an int64 holds

# safetensors dtype string -> (our tag, numpy storage dtype, little-endian)
_ST_DTYPES = {
    "BOOL": ("bool", np.dtype(np.bool_)),
    "U8": ("u8", np.dtype("u1")),
    "I8": ("i8", np.dtype("i1")),
    "U16": ("u16", np.dtype("<u2")),
    "I16": ("i16", np.dtype("<i2")),
    "F16": ("f16", np.dtype("<f2")),
    "BF16": ("bf16", np.dtype("<u2")),
    "U32": ("u32", np.dtype("<u4")),
    "I32": ("i32", np.dtype("<i4")),
    "F32": ("f32", np.dtype("<f4")),
    "U64": ("u64", np.dtype("<u8")),
    "I64": ("i64", np.dtype("<i8")),
    "F64": ("f64", np.dtype("<f8")),
}
# our tag -> numpy storage dtype
STORAGE_DTYPES = {tag: np_dtype for tag, np_dtype in _ST_DTYPES.values()}
# our tag -> safetensors dtype string
_TAG_TO_ST = {tag: st for st, (tag, _) in _ST_DTYPES.items()}
FLOAT_TAGS = ("bf16", "f16", "f32", "f64")


@dataclass
class RawTensor:
    """One tensor as stored: raw storage plus a dtype tag (bf16 travels as uint16)."""

    name: str  # tensor name, e.g. "model.layers.0.mlp.up_proj.weight"
    dtype: str  # element type tag: "bf16", "f16", "f32", "f64", "i8", "u8", ..., "bool"
    shape: tuple  # logical shape, tuple of ints
    data: np.ndarray  # storage array with exactly `shape`; uint16 bit patterns for bf16

    def __post_init__(self):
        self.shape = tuple(int(d) for d in self.shape)
        if self.dtype not in STORAGE_DTYPES:
            raise ValueError(f"tensor {self.name!r}: unknown dtype tag {self.dtype!r}")
        want = STORAGE_DTYPES[self.dtype]
        if self.data.dtype.newbyteorder("<") != want.newbyteorder("<"):
            raise ValueError(
                f"tensor {self.name!r}: dtype {self.dtype} needs {want} storage, got {self.data.dtype}")
        if tuple(self.data.shape) != self.shape:
            raise ValueError(f"tensor {self.name!r}: data shape {self.data.shape} != shape {self.shape}")

    @property
    def nbytes(self) -> int:
        return int(self.data.nbytes)


@dataclass(frozen=True)
class TensorSpec:
    """What the writer needs to know about a tensor before its data exists."""

    name: str  # tensor name
    dtype: str  # dtype tag, as in RawTensor
    shape: tuple  # logical shape


@dataclass
class SafetensorsFile:
    """A parsed safetensors file; tensors are views into one read-only memory map."""

    path: Path  # the file read
    tensors: dict = field(default_factory=dict)  # name -> RawTensor, in data-offset order
    metadata: dict = field(default_factory=dict)  # "__metadata__" str -> str, {} if absent


def _no_duplicates(pairs):
    out = dict(pairs)  # at C speed: a header may hold a few hundred thousand objects
    if len(out) != len(pairs):
        seen = set()
        duplicate = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise ValueError(f"duplicate key {duplicate!r} in header")
    return out


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _read_header(path: Path, file_size: int):
    if file_size < 8:
        raise ModelFileError(path, "header", f"not a safetensors file (only {file_size} bytes, "
                                             f"the header length needs 8)")
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if n > MAX_HEADER_BYTES:
            raise ModelFileError(path, "header", f"header length {n} is absurd (limit {MAX_HEADER_BYTES} bytes)")
        if n > file_size - 8:
            raise ModelFileError(path, "header",
                                 f"header length {n} exceeds the file size {file_size} (truncated file?)")
        raw = f.read(n)
    if len(raw) != n:
        raise ModelFileError(path, "header", f"file ended inside the {n}-byte header")
    header = loads_json(raw, path, "header", object_pairs_hook=_no_duplicates)
    if not isinstance(header, dict):
        raise ModelFileError(path, "header", f"header must be a JSON object, got {type(header).__name__}")
    if len(header) > MAX_TENSORS + 1:
        raise ModelFileError(path, "header", f"header lists {len(header)} entries (at most {MAX_TENSORS} tensors)")
    return 8 + n, header


def _parse_metadata(path: Path, header: dict) -> dict:
    meta = header.pop("__metadata__", None)
    if meta is None:
        return {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise ModelFileError(path, "__metadata__", "__metadata__ must be an object of string -> string")
    return meta


def _parse_entry(path: Path, name: str, entry, data_size: int):
    """Validate one header entry; returns (tag, shape, begin, end)."""
    def bad(message: str):
        raise ModelFileError(path, name, f"tensor {name!r}: {message}")

    if not name:
        raise ModelFileError(path, "header", "empty tensor name")
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= entry.keys():
        bad("entry must be an object with dtype, shape and data_offsets")
    st_dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(st_dtype, str) or st_dtype not in _ST_DTYPES:
        bad(f"unknown dtype {str(st_dtype)[:40]!r} (known: {', '.join(_ST_DTYPES)})")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(_is_int(d) for d in shape):
        bad(f"shape must be a list of at most {MAX_NDIM} integers, got {str(shape)[:80]}")
    if not all(0 <= d <= MAX_DIM for d in shape):
        bad(f"shape {shape} has a dimension outside [0, 2**63)")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) for o in offsets):
        bad(f"data_offsets must be [begin, end] integers, got {str(offsets)[:80]}")
    begin, end = offsets
    if not 0 <= begin <= end <= data_size:
        bad(f"byte range [{begin}, {end}) lies outside the data region of {data_size} bytes")
    tag, np_dtype = _ST_DTYPES[st_dtype]
    want = math.prod(shape) * np_dtype.itemsize  # at most 8 factors below 2**63: no runaway
    if end - begin != want:
        bad(f"shape {shape} x {np_dtype.itemsize} bytes = {want} bytes, but byte range holds {end - begin}")
    if want == 0 and math.prod(d for d in shape if d) * np_dtype.itemsize >= 1 << 62:
        bad(f"empty shape {shape} is too large to index")
    return tag, tuple(shape), begin, end


def read_safetensors(path: Union[str, os.PathLike]) -> SafetensorsFile:
    """Parse and validate a safetensors file; tensors are zero-copy read-only views."""
    path = Path(path)
    try:
        file_size = path.stat().st_size
    except OSError as e:
        raise ModelFileError(path, None, f"cannot read safetensors file: {e.strerror}") from None
    if not path.is_file():
        raise ModelFileError(path, None, "not a regular file")
    data_start, header = _read_header(path, file_size)
    metadata = _parse_metadata(path, header)
    data_size = file_size - data_start
    entries = sorted(((_parse_entry(path, name, e, data_size), name) for name, e in header.items()),
                     key=lambda item: (item[0][2], item[0][3]))
    prev_end, prev_name = 0, None
    for (_, _, begin, end), name in entries:
        if begin < end:
            if begin < prev_end:
                raise ModelFileError(path, name, f"tensor {name!r} overlaps tensor {prev_name!r} in the data region")
            prev_end, prev_name = end, name
    buf = np.memmap(path, dtype=np.uint8, mode="r") if file_size else np.zeros(0, np.uint8)
    out = SafetensorsFile(path=path, metadata=metadata)
    for (tag, shape, begin, end), name in entries:
        view = buf[data_start + begin:data_start + end].view(STORAGE_DTYPES[tag]).reshape(shape)
        out.tensors[name] = RawTensor(name=name, dtype=tag, shape=shape, data=view)
    return out


def _check_specs(specs: Sequence[TensorSpec], metadata) -> None:
    names = set()
    for s in specs:
        if not isinstance(s.name, str) or not s.name or s.name == "__metadata__":
            raise ValueError(f"invalid tensor name {s.name!r}")
        if s.name in names:
            raise ValueError(f"duplicate tensor name {s.name!r}")
        names.add(s.name)
        if s.dtype not in STORAGE_DTYPES:
            raise ValueError(f"tensor {s.name!r}: unknown dtype tag {s.dtype!r}")
        if any(int(d) < 0 for d in s.shape):
            raise ValueError(f"tensor {s.name!r}: negative dimension in shape {tuple(s.shape)}")
    if metadata is not None and not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError("safetensors __metadata__ must map strings to strings")


def write_safetensors_streaming(path: Union[str, os.PathLike], specs: Sequence[TensorSpec],
                                produce: Callable[[TensorSpec], np.ndarray], metadata=None) -> None:
    """Write a safetensors file whose tensors are produced one at a time, in `specs` order.

    The header is written first from the specs; `produce(spec)` is then called once per
    tensor and must return storage of exactly that shape and dtype. Only one tensor's
    data needs to be in memory at a time.
    """
    _check_specs(specs, metadata)
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = dict(metadata)
    sizes = []
    for s in specs:
        nbytes = math.prod(int(d) for d in s.shape) * STORAGE_DTYPES[s.dtype].itemsize
        header[s.name] = {"dtype": _TAG_TO_ST[s.dtype], "shape": [int(d) for d in s.shape],
                          "data_offsets": [offset, offset + nbytes]}
        sizes.append(nbytes)
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    blob += b" " * (-(8 + len(blob)) % 8)  # pad so the data region starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(blob).to_bytes(8, "little"))
        f.write(blob)
        for s, nbytes in zip(specs, sizes):
            arr = np.asarray(produce(s))
            want = STORAGE_DTYPES[s.dtype]
            if arr.dtype.newbyteorder("<") != want.newbyteorder("<") or tuple(arr.shape) != tuple(s.shape):
                raise ValueError(f"tensor {s.name!r}: expected {want} {tuple(s.shape)}, got {arr.dtype} {arr.shape}")
            arr = np.ascontiguousarray(arr, dtype=want)
            f.write(arr.reshape(-1).view(np.uint8).data)
            assert arr.nbytes == nbytes  # invariant: header offsets match the bytes written


def write_safetensors(path: Union[str, os.PathLike],
                      tensors: Union[Mapping[str, RawTensor], Iterable[RawTensor]], metadata=None) -> None:
    """Write in-memory RawTensors (a list, or a name -> RawTensor mapping) to `path`."""
    items = list(tensors.values()) if isinstance(tensors, Mapping) else list(tensors)
    by_name = {}
    for t in items:
        if not isinstance(t, RawTensor):
            raise ValueError(f"expected RawTensor, got {type(t).__name__}")
        by_name[t.name] = t
    specs = [TensorSpec(t.name, t.dtype, t.shape) for t in items]
    write_safetensors_streaming(path, specs, lambda s: by_name[s.name].data, metadata)

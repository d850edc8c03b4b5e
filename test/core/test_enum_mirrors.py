"""The Python enum mirrors equal the C headers, name for name and value for value, and the
dtype table agrees with llaisysDataTypeSize / llaisysDataTypeName."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import llaisys
from llaisys import DataType, DeviceType, MemcpyKind, MemoryKind, Status
from llaisys.dtypes import as_dtype, storage_numpy_dtype
from llaisys.libllaisys import LIB
from llaisys.libllaisys.kv_cache import KVLayout
from llaisys.libllaisys.model import Activation, Arch, RopeScaling, WeightKind
from llaisys.libllaisys.tensor import MAX_DIMS

INCLUDE = Path(__file__).parents[2] / "include"
HEADERS = sorted(INCLUDE.rglob("*.h"))  # llaisys.h, llaisys/runtime.h, ... : the whole C ABI

# C prefix -> the Python IntEnum that mirrors it
MIRRORS = {
    "LLAISYS_DTYPE_": DataType,
    "LLAISYS_DEVICE_": DeviceType,
    "LLAISYS_STATUS_": Status,
    "LLAISYS_MEMORY_": MemoryKind,
    "LLAISYS_MEMCPY_": MemcpyKind,
    "LLAISYS_KV_LAYOUT_": KVLayout,
    "LLAISYS_ARCH_": Arch,
    "LLAISYS_ROPE_": RopeScaling,
    "LLAISYS_ACT_": Activation,
    "LLAISYS_WEIGHT_": WeightKind,
}

# `LLAISYS_NAME = <decimal or hex>,` on a line of its own (the comma is optional on the last one)
ENUMERATOR = re.compile(r"^\s*(LLAISYS_[A-Z0-9_]+)\s*=\s*(-?(?:0[xX][0-9a-fA-F]+|\d+))\s*,?\s*$", re.MULTILINE)


def c_enumerators() -> dict[str, int]:
    found: dict[str, int] = {}
    for header in HEADERS:
        text = re.sub(r"/\*.*?\*/", "", header.read_text(), flags=re.DOTALL)  # drop comments
        for name, value in ENUMERATOR.findall(text):
            assert name not in found, f"{name} defined twice"
            found[name] = int(value, 0)
    return found


@pytest.mark.parametrize("prefix", list(MIRRORS))
def test_python_enum_mirrors_the_header(prefix):
    enum = MIRRORS[prefix]
    c_values = {name[len(prefix):]: value for name, value in c_enumerators().items() if name.startswith(prefix)}
    assert c_values, f"no {prefix}* enumerators found in {HEADERS}"
    py_values = {member.name: int(member) for member in enum}
    missing_in_python = sorted(set(c_values) - set(py_values))
    missing_in_c = sorted(set(py_values) - set(c_values))
    assert not missing_in_python, f"{enum.__name__} lacks {missing_in_python}"
    assert not missing_in_c, f"{enum.__name__} has {missing_in_c}, which the headers do not"
    assert py_values == c_values


def test_every_enumerator_has_a_mirror():
    unmirrored = [n for n in c_enumerators() if not any(n.startswith(p) for p in MIRRORS)]
    assert not unmirrored, f"enumerators without a Python mirror: {unmirrored}"


def test_max_dims_mirror():
    text = (INCLUDE / "llaisys" / "tensor.h").read_text()
    assert int(re.search(r"#define\s+LLAISYS_TENSOR_MAX_DIMS\s+(\d+)", text).group(1)) == MAX_DIMS


@pytest.mark.parametrize("dtype", [d for d in DataType if d != DataType.INVALID], ids=lambda d: d.name.lower())
def test_dtype_table_matches_the_library(dtype):
    name = LIB.llaisysDataTypeName(int(dtype)).decode()
    assert as_dtype(name) == dtype, f"C name {name!r} does not map back to {dtype!r}"
    block = LIB.llaisysDataTypeBlockSize(int(dtype))
    if int(dtype) >= 100:  # block-quantized: no element size; GGML's block geometry
        assert LIB.llaisysDataTypeSize(int(dtype)) == 0
        assert (block, LIB.llaisysDataTypeBlockBytes(int(dtype))) == QUANT_BLOCKS[name]
        return
    assert block == 1
    assert LIB.llaisysDataTypeSize(int(dtype)) == storage_numpy_dtype(dtype).itemsize
    assert LIB.llaisysDataTypeBlockBytes(int(dtype)) == storage_numpy_dtype(dtype).itemsize
    assert f"dtype={name}" in repr(llaisys.Tensor((1,), dtype))


# name -> (elements, bytes) per block, as ggml defines them
QUANT_BLOCKS = {"q4_0": (32, 18), "q4_1": (32, 20), "q5_0": (32, 22), "q5_1": (32, 24), "q8_0": (32, 34),
                "q2_k": (256, 84), "q3_k": (256, 110), "q4_k": (256, 144), "q5_k": (256, 176),
                "q6_k": (256, 210), "iq4_xs": (256, 136), "iq2_xxs": (256, 66), "iq2_xs": (256, 74),
                "iq2_s": (256, 82), "iq3_xxs": (256, 98), "iq3_s": (256, 110), "iq1_s": (256, 50), "iq1_m": (256, 56)}


def test_quant_dtype_values_are_ggml_type_ids_plus_100():
    gguf = pytest.importorskip("gguf")
    for name in QUANT_BLOCKS:
        ggml = gguf.GGMLQuantizationType[name.upper()]
        assert int(as_dtype(name)) == 100 + int(ggml)
        assert gguf.GGML_QUANT_SIZES[ggml] == (LIB.llaisysDataTypeBlockSize(100 + int(ggml)),
                                               LIB.llaisysDataTypeBlockBytes(100 + int(ggml)))


def test_invalid_dtype():
    for bad in (int(DataType.INVALID), 10, 101, 115, -1, 1 << 20):
        assert LIB.llaisysDataTypeSize(bad) == 0
        assert LIB.llaisysDataTypeBlockSize(bad) == 0
        assert LIB.llaisysDataTypeBlockBytes(bad) == 0
        assert LIB.llaisysDataTypeName(bad) == b"invalid"


def test_input_statuses_are_value_errors():
    """Exactly the statuses that blame the caller's input map to LlaisysInputError."""
    from llaisys.libllaisys import error_for

    inputs = {Status.INVALID_ARGUMENT, Status.SHAPE_MISMATCH, Status.DTYPE_MISMATCH, Status.DEVICE_MISMATCH,
              Status.OUT_OF_RANGE, Status.BUFFER_TOO_SMALL}
    for status in Status:
        if status <= 0 and status != Status.OK:
            err = error_for(int(status), "m")
            assert isinstance(err, llaisys.LlaisysError) and err.status == status
            assert isinstance(err, llaisys.LlaisysInputError) == (status in inputs), status
            assert str(err) == f"[{status.name}] m"
    assert str(error_for(-12345, "odd")) == "[-12345] odd"

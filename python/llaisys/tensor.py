"""Tensor: an owning Python handle on a libllaisys tensor, with numpy conversion."""

from __future__ import annotations

import ctypes
from typing import Sequence

import numpy as np

from .dtypes import (as_dtype, bf16_bits_to_f32, f32_to_bf16_bits, from_numpy_dtype, is_quantized, quant_byte_shape,
                     quant_element_shape, storage_numpy_dtype)
from .libllaisys import LIB, DataType, DeviceType, check, error_for, last_error
from .libllaisys.tensor import MAX_DIMS, llaisysTensor_t
from .owned import OwnedHandle


def _sizes(values: Sequence[int], what: str) -> "ctypes.Array[ctypes.c_size_t]":
    values = [int(v) for v in values]
    if len(values) > MAX_DIMS:
        raise ValueError(f"{what} has {len(values)} entries; at most {MAX_DIMS} are supported")
    if any(v < 0 for v in values):
        raise ValueError(f"{what} {values} has a negative entry")
    return (ctypes.c_size_t * max(len(values), 1))(*values)


class Tensor(OwnedHandle):
    """A tensor owned by this object; ``close()`` (or ``with``) releases the handle.

    Views (``view``, ``permute``, ``slice``, ``reshape``) share storage and keep it alive on
    their own, so handles can be closed in any order.
    """

    _DESTROY = "llaisysTensorDestroy"

    def __init__(self, shape: Sequence[int], dtype: "DataType | str" = DataType.F32,
                 device: DeviceType = DeviceType.CPU, device_id: int = 0):
        dt = as_dtype(dtype)
        self._handle = None
        out = llaisysTensor_t()
        check(LIB.llaisysTensorCreate2(_sizes(shape, "shape"), len(shape), int(dt), int(device), device_id,
                                       ctypes.byref(out)))
        self._handle = out.value

    @classmethod
    def _wrap(cls, handle: int) -> "Tensor":
        t = cls.__new__(cls)
        t._handle = cls._checked(handle)
        return t

    @staticmethod
    def _checked(handle) -> int:
        """A handle from a view-making call (handle or NULL), or its error raised."""
        if not handle:
            raise error_for(LIB.llaisysGetLastStatus(), last_error())
        return handle

    # -- lifetime ---------------------------------------------------------------------
    @property
    def handle(self) -> int:
        if self._handle is None:
            raise ValueError("tensor is closed")
        return self._handle

    # -- numpy ------------------------------------------------------------------------
    @classmethod
    def from_numpy(cls, array: np.ndarray, dtype: "DataType | str | None" = None,
                   device: DeviceType = DeviceType.CPU, device_id: int = 0,
                   shape: "Sequence[int] | None" = None) -> "Tensor":
        """Copy a numpy array into a new tensor. With dtype=bf16 a float array is rounded to
        bf16 (a uint16 array is taken as bf16 bit patterns); f16 and f32 convert likewise.

        A quantized dtype (q4_0 .. q6_k) takes the raw GGUF bytes: a uint8 array whose last dim
        is the bytes of a row ([.., k / block_size * block_bytes]); the element shape is
        `shape` when given (its byte count must match the array's), else read from the
        array's. Values are quantized with ops.quantize, not here."""
        array = np.asarray(array)
        dt = as_dtype(dtype) if dtype is not None else from_numpy_dtype(array.dtype)
        if is_quantized(dt):
            return cls._from_quantized_bytes(array, dt, shape, device, device_id)
        if shape is not None:
            raise ValueError("shape is only for quantized dtypes (the array's own shape is used)")
        if dt == DataType.BF16:
            data = array if array.dtype == np.uint16 else f32_to_bf16_bits(array.astype(np.float32))
        else:
            data = array.astype(storage_numpy_dtype(dt), copy=False)
        data = np.asarray(data, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        t = cls(data.shape, dt, device, device_id)
        check(LIB.llaisysTensorLoad(t.handle, data.ctypes.data_as(ctypes.c_void_p), data.nbytes))
        return t

    @classmethod
    def _from_quantized_bytes(cls, array: np.ndarray, dt: DataType, shape, device, device_id) -> "Tensor":
        name = dt.name.lower()
        if array.dtype != np.uint8:
            raise ValueError(f"array: a {name} tensor is built from its raw bytes (uint8), got {array.dtype} "
                             "(quantize float values with llaisys.ops.quantize)")
        if shape is None:
            shape = quant_element_shape(array.shape, dt)
        shape = tuple(int(d) for d in shape)
        want = quant_byte_shape(shape, dt)
        if array.size != int(np.prod(want)) or (array.ndim == len(want) and array.shape[-1] != want[-1]):
            raise ValueError(f"array: {array.nbytes} bytes of shape {array.shape} do not hold a {name} tensor "
                             f"of shape {shape}, which takes {int(np.prod(want))} bytes as {want}")
        data = np.ascontiguousarray(array).reshape(want)
        t = cls(shape, dt, device, device_id)
        check(LIB.llaisysTensorLoad(t.handle, data.ctypes.data_as(ctypes.c_void_p), data.nbytes))
        return t

    def numpy(self, raw: bool = False) -> np.ndarray:
        """A contiguous numpy copy. bf16 comes back as float32 (exact) unless raw=True, which
        gives the uint16 bit patterns. A quantized tensor comes back as its raw bytes: uint8
        [.., k / block_size * block_bytes] (ops.dequantize gives its values)."""
        shape = quant_byte_shape(self.shape, self.dtype) if is_quantized(self.dtype) else self.shape
        out = np.empty(shape, dtype=storage_numpy_dtype(self.dtype))
        check(LIB.llaisysTensorRead(self.handle, out.ctypes.data_as(ctypes.c_void_p), out.nbytes))
        if self.dtype == DataType.BF16 and not raw:
            return bf16_bits_to_f32(out)
        return out

    def load(self, array: np.ndarray) -> None:
        """Overwrite the contents from a numpy array of exactly this tensor's shape."""
        src = Tensor.from_numpy(array, self.dtype, shape=self.shape if is_quantized(self.dtype) else None)
        with src:
            if src.shape != self.shape:
                raise ValueError(f"cannot load an array of shape {src.shape} into a tensor of shape {self.shape}")
            self.copy_(src)

    # -- queries ----------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return LIB.llaisysTensorNdim(self.handle)

    @property
    def shape(self) -> tuple[int, ...]:
        n = self.ndim
        buf = (ctypes.c_size_t * max(n, 1))()
        check(LIB.llaisysTensorShape(self.handle, buf, n))
        return tuple(buf[i] for i in range(n))

    @property
    def strides(self) -> tuple[int, ...]:
        n = self.ndim
        buf = (ctypes.c_ssize_t * max(n, 1))()
        check(LIB.llaisysTensorStrides(self.handle, buf, n))
        return tuple(buf[i] for i in range(n))

    @property
    def dtype(self) -> DataType:
        return DataType(LIB.llaisysTensorDataType(self.handle))

    @property
    def device(self) -> DeviceType:
        return DeviceType(LIB.llaisysTensorDeviceType(self.handle))

    @property
    def device_id(self) -> int:
        return LIB.llaisysTensorDeviceId(self.handle)

    def numel(self) -> int:
        return LIB.llaisysTensorNumel(self.handle)

    def is_contiguous(self) -> bool:
        return bool(LIB.llaisysTensorIsContiguous(self.handle))

    def data_ptr(self) -> int:
        return LIB.llaisysTensorData(self.handle) or 0

    # -- views and copies -------------------------------------------------------------
    def view(self, *shape: int) -> "Tensor":
        return Tensor._wrap(LIB.llaisysTensorView(self.handle, _sizes(shape, "shape"), len(shape)))

    def reshape(self, *shape: int) -> "Tensor":
        return Tensor._wrap(LIB.llaisysTensorReshape(self.handle, _sizes(shape, "shape"), len(shape)))

    def permute(self, *order: int) -> "Tensor":
        return Tensor._wrap(LIB.llaisysTensorPermute(self.handle, _sizes(order, "order"), len(order)))

    def slice(self, dim: int, start: int, end: int) -> "Tensor":
        if min(dim, start, end) < 0:
            raise ValueError(f"slice({dim}, {start}, {end}): arguments must be non-negative")
        return Tensor._wrap(LIB.llaisysTensorSlice(self.handle, dim, start, end))

    def contiguous(self) -> "Tensor":
        return Tensor._wrap(LIB.llaisysTensorContiguous(self.handle))

    def copy_(self, src: "Tensor") -> "Tensor":
        check(LIB.llaisysTensorCopy(self.handle, src.handle))
        return self

    def debug(self, max_elements: int = 64) -> None:
        check(LIB.llaisysTensorDebug(self.handle, max_elements))

    def __repr__(self) -> str:
        if self._handle is None:
            return "Tensor(closed)"
        return f"Tensor(shape={self.shape}, dtype={self.dtype.name.lower()}, device={self.device.name.lower()})"

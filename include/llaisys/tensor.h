/* Tensors: an n-d view (shape, strides in elements, offset) over reference-counted storage
 * on one device. Views share storage with their source; the storage is released when the
 * last handle that uses it is destroyed, so handles may be destroyed in any order.
 */
#ifndef LLAISYS_TENSOR_H
#define LLAISYS_TENSOR_H

#include "../llaisys.h"

LLAISYS_EXTERN_C_BEGIN

#define LLAISYS_TENSOR_MAX_DIMS 8

typedef struct LlaisysTensor *llaisysTensor_t;

/* A new contiguous tensor of `shape[ndim]` (ndim <= LLAISYS_TENSOR_MAX_DIMS; ndim 0 is a
 * scalar, and `shape` may then be NULL), uninitialised, in *out. On error *out is NULL and
 * the status says why (INVALID_ARGUMENT for a NULL `out`, a bad dtype, device or shape;
 * OUT_OF_MEMORY). The caller owns the handle (llaisysTensorDestroy).
 * A block-quantized dtype (LLAISYS_DTYPE_Q4_0 .. Q6_K) needs ndim >= 1 and the last dim a
 * multiple of its block size (else SHAPE_MISMATCH); its storage is the GGUF blocks, rows of
 * last / block_size * block_bytes bytes, and its views keep whole rows: slices along any dim
 * but the last, permutes that keep the last dim last, views of a contiguous tensor to a last
 * dim that is a multiple of the block size (doc/c_api.md, "Quantized tensors"). */
LLAISYS_API llaisysStatus_t llaisysTensorCreate2(const size_t *shape, size_t ndim,
                                                 llaisysDataType_t dtype,
                                                 llaisysDeviceType_t device, int device_id,
                                                 llaisysTensor_t *out);

/* DEPRECATED: use llaisysTensorCreate2. The same tensor as the return value, NULL on error
 * (the cause in llaisysGetLastStatus / llaisysGetLastError). Kept working for existing
 * callers; the ABI is stable. */
LLAISYS_API llaisysTensor_t llaisysTensorCreate(const size_t *shape, size_t ndim,
                                                llaisysDataType_t dtype,
                                                llaisysDeviceType_t device, int device_id);

/* Release a handle: LLAISYS_STATUS_OK, or INVALID_ARGUMENT (with the message) for a
 * destroyed, foreign or non-tensor handle, which is left alone. NULL is a no-op returning
 * OK. Other views of the same storage stay valid.
 * (This returned void before the convention of doc/c_api.md; the return value travels in a
 * register that callers compiled against the void declaration ignore, so the ABI and C
 * sources that ignore the result are unchanged.) */
LLAISYS_API llaisysStatus_t llaisysTensorDestroy(llaisysTensor_t tensor);

/* Copy `size` bytes of host memory into a contiguous tensor; `size` must equal its
 * numel * element size (a quantized tensor: rows * k / block_size * block_bytes, its raw
 * blocks), else SHAPE_MISMATCH. */
LLAISYS_API llaisysStatus_t llaisysTensorLoad(llaisysTensor_t tensor, const void *src,
                                              size_t size);

/* Copy the tensor's elements, in row-major order, to host memory `dst` of `capacity`
 * bytes (any strides; a quantized tensor's raw blocks, row by row).
 * LLAISYS_STATUS_BUFFER_TOO_SMALL if capacity < its byte size (as for llaisysTensorLoad). */
LLAISYS_API llaisysStatus_t llaisysTensorRead(llaisysTensor_t tensor, void *dst,
                                              size_t capacity);

/* Queries. Invalid handles give 0 / LLAISYS_DTYPE_INVALID with the error set. */
LLAISYS_API size_t llaisysTensorNdim(llaisysTensor_t tensor);
LLAISYS_API size_t llaisysTensorNumel(llaisysTensor_t tensor);
LLAISYS_API llaisysDataType_t llaisysTensorDataType(llaisysTensor_t tensor);
LLAISYS_API llaisysDeviceType_t llaisysTensorDeviceType(llaisysTensor_t tensor);
LLAISYS_API int llaisysTensorDeviceId(llaisysTensor_t tensor);
/* 1 if row-major contiguous, 0 if not (or invalid handle). */
LLAISYS_API int llaisysTensorIsContiguous(llaisysTensor_t tensor);
/* Shape and strides (in elements) into caller arrays of `capacity` entries. */
LLAISYS_API llaisysStatus_t llaisysTensorShape(llaisysTensor_t tensor, size_t *shape,
                                               size_t capacity);
LLAISYS_API llaisysStatus_t llaisysTensorStrides(llaisysTensor_t tensor, ptrdiff_t *strides,
                                                 size_t capacity);
/* Pointer to the first element. Borrowed: valid while any handle to the storage lives. */
LLAISYS_API void *llaisysTensorData(llaisysTensor_t tensor);

/* New handles that share storage with `tensor`: NULL on error, the cause in
 * llaisysGetLastStatus / llaisysGetLastError (the caller owns them; llaisysTensorDestroy). */
/* The same elements seen with a new shape (same numel); fails with a shape error when the
 * strides cannot express it without a copy (use llaisysTensorReshape then). */
LLAISYS_API llaisysTensor_t llaisysTensorView(llaisysTensor_t tensor, const size_t *shape,
                                              size_t ndim);
/* Dimensions reordered: result dim i is source dim order[i]; `order` is a permutation. */
LLAISYS_API llaisysTensor_t llaisysTensorPermute(llaisysTensor_t tensor, const size_t *order,
                                                 size_t ndim);
/* Elements [start, end) along `dim` (0 <= start <= end <= shape[dim]). */
LLAISYS_API llaisysTensor_t llaisysTensorSlice(llaisysTensor_t tensor, size_t dim,
                                               size_t start, size_t end);
/* A view with the new shape when possible, else a contiguous copy with that shape. */
LLAISYS_API llaisysTensor_t llaisysTensorReshape(llaisysTensor_t tensor, const size_t *shape,
                                                 size_t ndim);
/* A contiguous tensor with the same elements: a new handle to the same storage when already
 * contiguous, else a copy. */
LLAISYS_API llaisysTensor_t llaisysTensorContiguous(llaisysTensor_t tensor);

/* Copy all elements of `src` into `dst` (same shape, dtype and device; any strides). */
LLAISYS_API llaisysStatus_t llaisysTensorCopy(llaisysTensor_t dst, llaisysTensor_t src);

/* Print shape, strides, dtype, device and the values (at most `max_elements`, 0: all) to
 * stdout, for debugging. */
LLAISYS_API llaisysStatus_t llaisysTensorDebug(llaisysTensor_t tensor, size_t max_elements);

LLAISYS_EXTERN_C_END

#endif /* LLAISYS_TENSOR_H */

// Argument checks shared by the ops' entry points (src/ops/<op>/op.cpp).
#pragma once

#include "../tensor/tensor.hpp"
#include "../utils/error.hpp"
#include "../utils/types.hpp"

#include <initializer_list>
#include <vector>

namespace llaisys::ops {

inline void check_same_device(const char *op, std::initializer_list<const Tensor *> ts) {
    const Tensor *first = *ts.begin();
    for (const Tensor *t : ts) {
        LLAISYS_CHECK(t->device() == first->device() && t->device_id() == first->device_id(),
                      LLAISYS_STATUS_DEVICE_MISMATCH, op, ": tensors on different devices: ", first->describe(),
                      " and ", t->describe());
    }
}

inline void check_same_dtype(const char *op, std::initializer_list<const Tensor *> ts) {
    const Tensor *first = *ts.begin();
    for (const Tensor *t : ts) {
        LLAISYS_CHECK(t->dtype() == first->dtype(), LLAISYS_STATUS_DTYPE_MISMATCH, op,
                      ": dtypes differ: ", first->describe(), " and ", t->describe());
    }
}

inline void check_dtype(const char *op, const char *name, const Tensor &t, llaisysDataType_t dtype) {
    LLAISYS_CHECK(t.dtype() == dtype, LLAISYS_STATUS_DTYPE_MISMATCH, op, ": ", name, " must be ",
                  dtype_name(dtype), ", got ", t.describe());
}

inline void check_float(const char *op, const Tensor &t) {
    LLAISYS_CHECK(is_float_dtype(t.dtype()), LLAISYS_STATUS_DTYPE_MISMATCH, op,
                  ": needs an f32, f16 or bf16 tensor, got ", t.describe());
}

inline void check_contiguous(const char *op, std::initializer_list<const Tensor *> ts) {
    for (const Tensor *t : ts) {
        LLAISYS_CHECK_ARG(t->is_contiguous(), op, ": needs contiguous tensors, got ", t->describe());
    }
}

inline void check_ndim(const char *op, const char *name, const Tensor &t, size_t ndim) {
    LLAISYS_CHECK(t.ndim() == ndim, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": ", name, " must be ", ndim,
                  "-d, got ", t.describe());
}

inline void check_shape(const char *op, const char *name, const Tensor &t, const std::vector<size_t> &shape) {
    LLAISYS_CHECK(t.shape() == shape, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": ", name, " has the wrong shape: ",
                  t.describe());
}

// Kernels for the NVIDIA device are added with the CUDA backend; until one exists for an op,
// calling it on that device is an UNSUPPORTED error rather than a crash.
[[noreturn]] inline void no_kernel(const char *op, const Tensor &t) {
    fail(LLAISYS_STATUS_UNSUPPORTED, op, ": no kernel for ", t.describe());
}

}  // namespace llaisys::ops

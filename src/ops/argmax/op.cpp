#include "op.hpp"

#include "../check.hpp"
#include "cpu/argmax_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/argmax_nvidia.hpp"
#endif

namespace llaisys::ops {

void argmax(Tensor &max_idx, Tensor &max_val, const Tensor &vals) {
    const char *op = "argmax";
    check_same_device(op, {&max_idx, &max_val, &vals});
    check_same_dtype(op, {&max_val, &vals});
    check_float(op, vals);
    check_dtype(op, "max_idx", max_idx, LLAISYS_DTYPE_I64);
    LLAISYS_CHECK(vals.ndim() == 1 || vals.ndim() == 2, LLAISYS_STATUS_SHAPE_MISMATCH, op,
                  ": vals must be 1-d or 2-d, got ", vals.describe());
    size_t rows = vals.ndim() == 1 ? 1 : vals.shape()[0];
    size_t n = vals.shape().back();
    LLAISYS_CHECK(n > 0, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": rows of vals are empty: ", vals.describe());
    check_shape(op, "max_idx", max_idx, {rows});
    check_shape(op, "max_val", max_val, {rows});
    check_contiguous(op, {&max_idx, &max_val, &vals});
    if (vals.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(vals.device_id(), [&](cudaStream_t s) {
            nvidia::argmax(max_idx.data_as<int64_t>(), max_val.data(), vals.data(), vals.dtype(), rows, n, s);
        });
        return;
#endif
    }
    if (vals.device() != LLAISYS_DEVICE_CPU) no_kernel(op, vals);
    cpu::argmax(max_idx.data_as<int64_t>(), max_val.data(), vals.data(), vals.dtype(), rows, n);
}

}  // namespace llaisys::ops

#include "op.hpp"

#include "../check.hpp"
#include "cpu/softmax_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/softmax_nvidia.hpp"
#endif

namespace llaisys::ops {

void softmax(Tensor &out, const Tensor &in) {
    const char *op = "softmax";
    check_same_device(op, {&out, &in});
    check_same_dtype(op, {&out, &in});
    check_float(op, out);
    LLAISYS_CHECK(in.ndim() >= 1, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": needs at least 1 dim, got ",
                  in.describe());
    check_shape(op, "out", out, in.shape());
    check_contiguous(op, {&out, &in});
    size_t n = in.shape().back();
    size_t rows = n == 0 ? 0 : in.numel() / n;
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&](cudaStream_t s) { nvidia::softmax(out.data(), in.data(), out.dtype(), rows, n, s); });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::softmax(out.data(), in.data(), out.dtype(), rows, n);
}

}  // namespace llaisys::ops

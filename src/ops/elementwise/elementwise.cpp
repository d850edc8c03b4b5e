#include "elementwise.hpp"

#include "../check.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/elementwise_nvidia.hpp"
#endif

namespace llaisys::ops {

void binary_op(const char *name, cpu::BinaryOp op, Tensor &out, const Tensor &a, const Tensor &b) {
    check_same_device(name, {&out, &a, &b});
    check_same_dtype(name, {&out, &a, &b});
    check_float(name, out);
    check_shape(name, "a", a, out.shape());
    check_shape(name, "b", b, out.shape());
    check_contiguous(name, {&out, &a, &b});
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::binary(op, out.data(), a.data(), b.data(), out.dtype(), out.numel(), s);
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(name, out);
    cpu::binary(op, out.data(), a.data(), b.data(), out.dtype(), out.numel());
}

}  // namespace llaisys::ops

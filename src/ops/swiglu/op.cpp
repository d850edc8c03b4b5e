#include "op.hpp"

#include "../check.hpp"
#include "cpu/swiglu_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/swiglu_nvidia.hpp"
#endif

namespace llaisys::ops {

void swiglu(Tensor &out, const Tensor &gate, const Tensor &up) {
    const char *op = "swiglu";
    check_same_device(op, {&out, &gate, &up});
    check_same_dtype(op, {&out, &gate, &up});
    check_float(op, out);
    check_shape(op, "gate", gate, out.shape());
    check_shape(op, "up", up, out.shape());
    check_contiguous(op, {&out, &gate, &up});
    size_t n = out.numel();
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::swiglu(out.data(), gate.data(), up.data(), out.dtype(), 1, n, n, n, s);
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::swiglu(out.data(), gate.data(), up.data(), out.dtype(), 1, n, n, n);
}

}  // namespace llaisys::ops

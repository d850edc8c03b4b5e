#include "op.hpp"

#include "../check.hpp"
#include "cpu/rms_norm_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/rms_norm_nvidia.hpp"
#endif

#include <cmath>

namespace llaisys::ops {

void rms_norm(Tensor &out, const Tensor &in, const Tensor &weight, float eps) {
    const char *op = "rms_norm";
    check_same_device(op, {&out, &in, &weight});
    check_same_dtype(op, {&out, &in});
    check_float(op, out);
    check_float(op, weight);  // may differ from the activations' dtype
    check_ndim(op, "in", in, 2);
    check_shape(op, "out", out, in.shape());
    check_shape(op, "weight", weight, {in.shape()[1]});
    check_contiguous(op, {&out, &in, &weight});
    LLAISYS_CHECK_ARG(std::isfinite(eps) && eps > 0.0f, op, ": eps must be a positive number, got ", eps);
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::rms_norm(out.data(), in.data(), out.dtype(), weight.data(), weight.dtype(), in.shape()[0],
                             in.shape()[1], eps, s);
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::rms_norm(out.data(), in.data(), out.dtype(), weight.data(), weight.dtype(), in.shape()[0], in.shape()[1],
                  eps);
}

void add_rms_norm(Tensor &out, Tensor &residual, const Tensor &in, const Tensor &weight, float eps) {
    const char *op = "add_rms_norm";
    check_same_device(op, {&out, &residual, &in, &weight});
    check_same_dtype(op, {&out, &residual, &in});
    check_float(op, out);
    check_float(op, weight);
    check_ndim(op, "in", in, 2);
    check_shape(op, "out", out, in.shape());
    check_shape(op, "residual", residual, in.shape());
    check_shape(op, "weight", weight, {in.shape()[1]});
    check_contiguous(op, {&out, &residual, &in, &weight});
    LLAISYS_CHECK_ARG(std::isfinite(eps) && eps > 0.0f, op, ": eps must be a positive number, got ", eps);
    LLAISYS_CHECK_ARG(out.data() != residual.data() && out.data() != in.data(), op,
                      ": out must not alias residual or in");
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::add_rms_norm(out.data(), residual.data(), in.data(), out.dtype(), weight.data(), weight.dtype(),
                                 in.shape()[0], in.shape()[1], eps, s);
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::add_rms_norm(out.data(), residual.data(), in.data(), out.dtype(), weight.data(), weight.dtype(),
                      in.shape()[0], in.shape()[1], eps);
}

void rms_norm_heads(Tensor &x, const Tensor &weight, float eps) {
    const char *op = "rms_norm_heads";
    check_same_device(op, {&x, &weight});
    check_float(op, x);
    check_float(op, weight);
    check_ndim(op, "x", x, 3);
    const size_t n = x.shape()[0], heads = x.shape()[1], d = x.shape()[2];
    check_shape(op, "weight", weight, {d});
    check_contiguous(op, {&x, &weight});
    LLAISYS_CHECK_ARG(std::isfinite(eps) && eps > 0.0f, op, ": eps must be a positive number, got ", eps);
    if (x.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(x.device_id(), [&](cudaStream_t s) {
            nvidia::rms_norm_heads(x.data(), x.dtype(), weight.data(), weight.dtype(), n, heads, d, heads * d, eps, s);
        });
        return;
#endif
    }
    if (x.device() != LLAISYS_DEVICE_CPU) no_kernel(op, x);
    cpu::rms_norm_heads(x.data(), x.dtype(), weight.data(), weight.dtype(), n, heads, d, heads * d, eps);
}

}  // namespace llaisys::ops

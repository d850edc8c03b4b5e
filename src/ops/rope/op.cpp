#include "op.hpp"

#include "../check.hpp"
#include "cpu/rope_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/rope_nvidia.hpp"
#endif

#include <cmath>
#include <vector>

namespace llaisys::ops {
namespace {

void check_args(const char *op, const Tensor &out, const Tensor &in, const Tensor &pos) {
    check_same_device(op, {&out, &in, &pos});
    check_same_dtype(op, {&out, &in});
    check_float(op, out);
    check_dtype(op, "pos", pos, LLAISYS_DTYPE_I64);
    check_ndim(op, "in", in, 3);
    check_shape(op, "out", out, in.shape());
    check_shape(op, "pos", pos, {in.shape()[0]});
    check_contiguous(op, {&out, &in, &pos});
    LLAISYS_CHECK(in.shape()[2] % 2 == 0, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": head dim must be even, got ",
                  in.describe());
}

void check_positions(const char *op, const int64_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) {
        LLAISYS_CHECK(p[i] >= 0, LLAISYS_STATUS_OUT_OF_RANGE, op, ": pos[", i, "] = ", p[i], " is negative");
    }
}

// Runs the rotation with either a table tensor (inv_freq != nullptr) or base theta.
void run(Tensor &out, const Tensor &in, const Tensor &pos, const Tensor *inv_freq, float theta, float attn_scale) {
    const char *op = "rope";
    const size_t n = in.shape()[0], heads = in.shape()[1], d = in.shape()[2];
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        const std::vector<int64_t> p = host_copy<int64_t>(pos);
        check_positions(op, p.data(), p.size());
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            if (inv_freq) {
                nvidia::rope(out.data(), in.data(), pos.data_as<int64_t>(), out.dtype(), n, heads, d, heads * d,
                             inv_freq->data_as<float>(), attn_scale, s);
            } else {
                nvidia::rope(out.data(), in.data(), pos.data_as<int64_t>(), out.dtype(), n, heads, d, heads * d, theta,
                             s);
            }
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    check_positions(op, pos.data_as<int64_t>(), pos.numel());
    if (inv_freq) {
        cpu::rope(out.data(), in.data(), pos.data_as<int64_t>(), out.dtype(), n, heads, d, heads * d,
                  inv_freq->data_as<float>(), attn_scale);
    } else {
        cpu::rope(out.data(), in.data(), pos.data_as<int64_t>(), out.dtype(), n, heads, d, heads * d, theta);
    }
}

}  // namespace

void rope(Tensor &out, const Tensor &in, const Tensor &pos, float theta) {
    check_args("rope", out, in, pos);
    LLAISYS_CHECK_ARG(std::isfinite(theta) && theta > 0.0f, "rope: theta must be positive, got ", theta);
    run(out, in, pos, nullptr, theta, 1.0f);
}

void rope(Tensor &out, const Tensor &in, const Tensor &pos, const Tensor &inv_freq, float attn_scale) {
    const char *op = "rope";
    check_args(op, out, in, pos);
    check_same_device(op, {&out, &inv_freq});
    check_dtype(op, "inv_freq", inv_freq, LLAISYS_DTYPE_F32);
    check_shape(op, "inv_freq", inv_freq, {in.shape()[2] / 2});
    check_contiguous(op, {&inv_freq});
    LLAISYS_CHECK_ARG(std::isfinite(attn_scale) && attn_scale > 0.0f, op,
                      ": attn_scale must be finite and > 0, got ", attn_scale);
    // a NaN or infinite frequency would turn every rotated value into NaN
    const std::vector<float> f = out.device() == LLAISYS_DEVICE_CPU
                                     ? std::vector<float>(inv_freq.data_as<float>(),
                                                          inv_freq.data_as<float>() + inv_freq.numel())
#ifdef LLAISYS_ENABLE_NVIDIA
                                     : host_copy<float>(inv_freq);
#else
                                     : std::vector<float>();
#endif
    for (size_t j = 0; j < f.size(); j++) {
        LLAISYS_CHECK_ARG(std::isfinite(f[j]), op, ": inv_freq[", j, "] = ", f[j], " is not finite");
    }
    run(out, in, pos, &inv_freq, 0.0f, attn_scale);
}

}  // namespace llaisys::ops

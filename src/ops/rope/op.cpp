#include "op.hpp"

#include "../check.hpp"
#include "cpu/rope_cpu.hpp"

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/rope_nvidia.hpp"
#endif

#include <cmath>

namespace llaisys::ops {

void rope(Tensor &out, const Tensor &in, const Tensor &pos, float theta) {
    const char *op = "rope";
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
    LLAISYS_CHECK_ARG(std::isfinite(theta) && theta > 0.0f, op, ": theta must be positive, got ", theta);
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        const std::vector<int64_t> p = host_copy<int64_t>(pos);
        for (size_t i = 0; i < p.size(); i++) {
            LLAISYS_CHECK(p[i] >= 0, LLAISYS_STATUS_OUT_OF_RANGE, op, ": pos[", i, "] = ", p[i], " is negative");
        }
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::rope(out.data(), in.data(), pos.data_as<int64_t>(), out.dtype(), in.shape()[0], in.shape()[1],
                         in.shape()[2], in.shape()[1] * in.shape()[2], theta, s);
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    const int64_t *p = pos.data_as<int64_t>();
    for (size_t i = 0; i < pos.numel(); i++) {
        LLAISYS_CHECK(p[i] >= 0, LLAISYS_STATUS_OUT_OF_RANGE, op, ": pos[", i, "] = ", p[i], " is negative");
    }
    cpu::rope(out.data(), in.data(), pos.data_as<int64_t>(), out.dtype(), in.shape()[0], in.shape()[1],
              in.shape()[2], in.shape()[1] * in.shape()[2], theta);
}

}  // namespace llaisys::ops

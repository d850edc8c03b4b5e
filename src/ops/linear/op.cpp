#include "op.hpp"

#include "../check.hpp"
#include "../cpu_simd/row_kernels.hpp"
#include "cpu/linear_cpu.hpp"

#include <algorithm>
#include <vector>

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/linear_nvidia.hpp"
#endif

namespace llaisys::ops {

void linear(Tensor &out, const Tensor &in, const Tensor &weight, const Tensor *bias) {
    const char *op = "linear";
    check_same_device(op, {&out, &in, &weight});
    check_same_dtype(op, {&out, &in});
    check_float(op, out);
    check_float(op, weight);  // may differ from the activations' dtype
    check_ndim(op, "in", in, 2);
    check_ndim(op, "weight", weight, 2);
    size_t m = in.shape()[0], k = in.shape()[1], n = weight.shape()[0];
    LLAISYS_CHECK(weight.shape()[1] == k, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": in ", in.describe(),
                  " and weight ", weight.describe(), " disagree on the inner dimension");
    check_shape(op, "out", out, {m, n});
    check_contiguous(op, {&out, &in, &weight});
    if (bias) {
        check_same_device(op, {&out, bias});
        check_same_dtype(op, {&weight, bias});
        check_shape(op, "bias", *bias, {n});
        check_contiguous(op, {bias});
    }
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::linear(out.data(), in.data(), out.dtype(), weight.data(), bias ? bias->data() : nullptr,
                           weight.dtype(), m, n, k, out.device_id(), s);
        });
        return;
#endif
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::linear(out.data(), in.data(), out.dtype(), weight.data(), bias ? bias->data() : nullptr, weight.dtype(), m,
                n, k);
}

std::unique_ptr<cpu::PackedWeight> pack_linear(const Tensor &weight) {
    const char *op = "packed linear";
    check_float(op, weight);
    check_ndim(op, "weight", weight, 2);
    check_contiguous(op, {&weight});
    if (weight.device() != LLAISYS_DEVICE_CPU) no_kernel(op, weight);
    return std::make_unique<cpu::PackedWeight>(
        cpu::PackedWeight::pack(weight.data(), weight.dtype(), weight.shape()[0], weight.shape()[1]));
}

void linear_packed(Tensor &out, const Tensor &in, const cpu::PackedWeight &w, const Tensor *bias) {
    const char *op = "packed linear";
    check_same_device(op, {&out, &in});
    check_dtype(op, "out", out, LLAISYS_DTYPE_F32);
    check_dtype(op, "in", in, LLAISYS_DTYPE_F32);
    check_ndim(op, "in", in, 2);
    const size_t m = in.shape()[0];
    LLAISYS_CHECK(in.shape()[1] == w.k(), LLAISYS_STATUS_SHAPE_MISMATCH, op, ": in ", in.describe(),
                  " and the packed weight [", w.n(), ", ", w.k(), "] disagree on the inner dimension");
    check_shape(op, "out", out, {m, w.n()});
    check_contiguous(op, {&out, &in});
    if (bias) {
        check_same_device(op, {&out, bias});
        check_dtype(op, "bias", *bias, w.dtype());
        check_shape(op, "bias", *bias, {w.n()});
        check_contiguous(op, {bias});
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    cpu::linear_packed(reinterpret_cast<float *>(out.data()), reinterpret_cast<const float *>(in.data()), w,
                       bias ? bias->data() : nullptr, m);
}

bool argmax_packed(int64_t *ids, const Tensor &in, const cpu::PackedWeight &w, const cpu::LogitScreen &screen) {
    const char *op = "packed linear argmax";
    LLAISYS_CHECK_ARG(ids != nullptr, op, ": ids is NULL");
    check_dtype(op, "in", in, LLAISYS_DTYPE_F32);
    check_ndim(op, "in", in, 2);
    check_contiguous(op, {&in});
    if (in.device() != LLAISYS_DEVICE_CPU) no_kernel(op, in);
    LLAISYS_CHECK(in.shape()[1] == w.k(), LLAISYS_STATUS_SHAPE_MISMATCH, op, ": in ", in.describe(),
                  " and the packed weight [", w.n(), ", ", w.k(), "] disagree on the inner dimension");
    const size_t m = in.shape()[0], n = w.n(), k = w.k(), rows = cpu::LogitScreen::kMaxRows;
    const float *x = reinterpret_cast<const float *>(in.data());
    std::vector<float> logits(std::min(m, rows) * n);
    bool all = true;
    for (size_t i0 = 0; i0 < m; i0 += rows) {
        const size_t r = std::min(rows, m - i0);
        if (screen.argmax(ids + i0, x + i0 * k, r, logits.data())) continue;
        all = false;
        cpu::linear_packed(logits.data(), x + i0 * k, w, nullptr, r);
        for (size_t i = 0; i < r; i++) ids[i0 + i] = int64_t(cpu::simd::row_kernels().argmax(logits.data() + i * n, n));
    }
    return all;
}

}  // namespace llaisys::ops

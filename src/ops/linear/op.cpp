#include "op.hpp"

#include "../check.hpp"
#include "../cpu_simd/row_kernels.hpp"
#include "cpu/linear_cpu.hpp"

#include <algorithm>
#include <vector>

#ifdef LLAISYS_ENABLE_NVIDIA
#include "../nvidia_launch.hpp"
#include "nvidia/linear_nvidia.hpp"
#include "nvidia/quant_linear_nvidia.hpp"
#endif

namespace llaisys::ops {
namespace {

// linear with a block-quantized weight: f32 activations run in place; f16 / bf16 ones are
// widened to f32 and the result rounded back once. On a GPU, nvidia/quant_linear_nvidia.hpp.
void linear_quantized(Tensor &out, const Tensor &in, const Tensor &weight, const Tensor *bias) {
    const char *op = "linear";
    check_same_device(op, {&out, &in, &weight});
    check_same_dtype(op, {&out, &in});
    check_float(op, out);
    check_ndim(op, "in", in, 2);
    check_ndim(op, "weight", weight, 2);
    const size_t m = in.shape()[0], k = in.shape()[1], n = weight.shape()[0];
    LLAISYS_CHECK(weight.shape()[1] == k, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": in ", in.describe(), " and weight ",
                  weight.describe(), " disagree on the inner dimension");
    check_shape(op, "out", out, {m, n});
    check_contiguous(op, {&out, &in, &weight});
    if (bias) {
        check_same_device(op, {&out, bias});
        check_float(op, *bias);
        check_shape(op, "bias", *bias, {n});
        check_contiguous(op, {bias});
    }
    if (out.device() != LLAISYS_DEVICE_CPU && out.device() != LLAISYS_DEVICE_NVIDIA) no_kernel(op, weight);
    if (n == 0 || m == 0) return;
    const cpu::QuantRows rows{0, n, weight.dtype(), weight.nbytes() / n, weight.data()};
    const std::byte *b = bias ? bias->data() : nullptr;
    const llaisysDataType_t bdt = bias ? bias->dtype() : LLAISYS_DTYPE_F32;
    if (out.device() == LLAISYS_DEVICE_NVIDIA) {
#ifdef LLAISYS_ENABLE_NVIDIA
        run_nvidia(out.device_id(), [&](cudaStream_t s) {
            nvidia::linear_quant(out.data(), in.data(), out.dtype(), &rows, 1, n, k, b, bdt, m, out.device_id(), s);
        });
        return;
#else
        no_kernel(op, weight);
#endif
    }
    if (out.dtype() == LLAISYS_DTYPE_F32) {
        cpu::linear_quant_rows(reinterpret_cast<float *>(out.data()), reinterpret_cast<const float *>(in.data()), &rows,
                               1, n, k, b, bdt, m);
        return;
    }
    std::vector<float> x(m * k), y(m * n);  // [m, k] in widened, [m, n] f32 result
    dispatch_float(in.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T *src = reinterpret_cast<const T *>(in.data());
        for (size_t i = 0; i < m * k; i++) x[i] = to_f32(src[i]);
        cpu::linear_quant_rows(y.data(), x.data(), &rows, 1, n, k, b, bdt, m);
        T *dst = reinterpret_cast<T *>(out.data());
        for (size_t i = 0; i < m * n; i++) dst[i] = from_f32<T>(y[i]);
    });
}

// Applying a held weight [n, k] (packed or quantized): out [m, n] and in [m, k] f32, contiguous,
// on the CPU, bias [n] on out's device (its dtype is the caller's rule). Returns m.
size_t check_apply(const char *op, const char *kind, const Tensor &out, const Tensor &in, size_t n, size_t k,
                   const Tensor *bias) {
    check_same_device(op, {&out, &in});
    check_dtype(op, "out", out, LLAISYS_DTYPE_F32);
    check_dtype(op, "in", in, LLAISYS_DTYPE_F32);
    check_ndim(op, "in", in, 2);
    const size_t m = in.shape()[0];
    LLAISYS_CHECK(in.shape()[1] == k, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": in ", in.describe(), " and the ", kind,
                  " weight [", n, ", ", k, "] disagree on the inner dimension");
    check_shape(op, "out", out, {m, n});
    check_contiguous(op, {&out, &in});
    if (bias) {
        check_same_device(op, {&out, bias});
        check_shape(op, "bias", *bias, {n});
        check_contiguous(op, {bias});
    }
    if (out.device() != LLAISYS_DEVICE_CPU) no_kernel(op, out);
    return m;
}

}  // namespace

void linear(Tensor &out, const Tensor &in, const Tensor &weight, const Tensor *bias) {
    if (weight.is_quantized()) {
        linear_quantized(out, in, weight, bias);
        return;
    }
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
    const size_t m = check_apply(op, "packed", out, in, w.n(), w.k(), bias);
    if (bias) check_dtype(op, "bias", *bias, w.dtype());
    cpu::linear_packed(reinterpret_cast<float *>(out.data()), reinterpret_cast<const float *>(in.data()), w,
                       bias ? bias->data() : nullptr, m);
}

std::unique_ptr<cpu::QuantWeight> pack_linear_quant(const Tensor &weight) { return pack_linear_quant({&weight}); }

std::unique_ptr<cpu::QuantWeight> pack_linear_quant(const std::vector<const Tensor *> &parts) {
    const char *op = "packed linear";
    LLAISYS_CHECK_ARG(!parts.empty(), op, ": no weight parts");
    size_t n = 0, k = 0;
    for (size_t i = 0; i < parts.size(); i++) {
        const Tensor &p = *parts[i];
        LLAISYS_CHECK(p.is_quantized(), LLAISYS_STATUS_DTYPE_MISMATCH, op, ": part ", i,
                      " must be a block-quantized weight, got ", p.describe());
        check_ndim(op, "weight", p, 2);
        check_contiguous(op, {&p});
        if (p.device() != LLAISYS_DEVICE_CPU) no_kernel(op, p);
        if (i == 0) k = p.shape()[1];
        LLAISYS_CHECK(p.shape()[1] == k, LLAISYS_STATUS_SHAPE_MISMATCH, op, ": part ", i, " ", p.describe(),
                      " has another k than part 0 (", k, ")");
        n += p.shape()[0];
    }
    auto w = std::make_unique<cpu::QuantWeight>(n, k);
    size_t row0 = 0;
    for (const Tensor *p : parts) {
        w->set_rows(row0, p->shape()[0], p->data(), p->dtype());
        row0 += p->shape()[0];
    }
    return w;
}

void linear_quant(Tensor &out, const Tensor &in, const cpu::QuantWeight &w, const Tensor *bias) {
    const char *op = "packed linear";
    const size_t m = check_apply(op, "quantized", out, in, w.n(), w.k(), bias);
    if (bias) check_float(op, *bias);
    cpu::linear_quant(reinterpret_cast<float *>(out.data()), reinterpret_cast<const float *>(in.data()), w,
                      bias ? bias->data() : nullptr, bias ? bias->dtype() : LLAISYS_DTYPE_F32, m);
}

void argmax_quant(int64_t *ids, const Tensor &in, const cpu::QuantWeight &w) {
    const char *op = "packed linear argmax";
    LLAISYS_CHECK_ARG(ids != nullptr, op, ": ids is NULL");
    check_dtype(op, "in", in, LLAISYS_DTYPE_F32);
    check_ndim(op, "in", in, 2);
    check_contiguous(op, {&in});
    if (in.device() != LLAISYS_DEVICE_CPU) no_kernel(op, in);
    LLAISYS_CHECK(in.shape()[1] == w.k(), LLAISYS_STATUS_SHAPE_MISMATCH, op, ": in ", in.describe(),
                  " and the quantized weight [", w.n(), ", ", w.k(), "] disagree on the inner dimension");
    const size_t m = in.shape()[0], n = w.n(), k = w.k(), rows = cpu::LogitScreen::kMaxRows;
    const float *x = reinterpret_cast<const float *>(in.data());
    std::vector<float> logits(std::min(m, rows) * n);  // [rows, n]
    for (size_t i0 = 0; i0 < m; i0 += rows) {
        const size_t r = std::min(rows, m - i0);
        cpu::linear_quant(logits.data(), x + i0 * k, w, nullptr, LLAISYS_DTYPE_F32, r);
        for (size_t i = 0; i < r; i++) ids[i0 + i] = int64_t(cpu::simd::row_kernels().argmax(logits.data() + i * n, n));
    }
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

// Mixture-of-experts ops (CPU): checks, then the kernels the decoder's CPU backend runs
// (cpu/moe_cpu.hpp and the packed linear), so the op tests test those.
#include "op.hpp"

#include "../check.hpp"
#include "../linear/cpu/linear_cpu.hpp"
#include "../linear/cpu/packed.hpp"
#include "../swiglu/cpu/swiglu_cpu.hpp"
#include "cpu/moe_cpu.hpp"

#include <vector>

namespace llaisys::ops {
namespace {

constexpr llaisysDataType_t kF32 = LLAISYS_DTYPE_F32;

float *f32(Tensor &t) { return reinterpret_cast<float *>(t.data()); }
const float *f32(const Tensor &t) { return reinterpret_cast<const float *>(t.data()); }
const int32_t *i32(const Tensor &t) { return reinterpret_cast<const int32_t *>(t.data()); }

void check_cpu(const char *op, const Tensor &t) {
    if (t.device() != LLAISYS_DEVICE_CPU) no_kernel(op, t);
}

}  // namespace

void moe_topk(Tensor &ids, Tensor &weights, const Tensor &logits, bool norm_topk_prob) {
    const char *op = "moe_topk";
    check_same_device(op, {&ids, &weights, &logits});
    check_cpu(op, logits);
    check_dtype(op, "ids", ids, LLAISYS_DTYPE_I32);
    check_dtype(op, "weights", weights, kF32);
    check_dtype(op, "logits", logits, kF32);
    check_ndim(op, "logits", logits, 2);
    check_ndim(op, "ids", ids, 2);
    const size_t n = logits.shape()[0], E = logits.shape()[1], k = ids.shape()[1];
    check_shape(op, "ids", ids, {n, k});
    check_shape(op, "weights", weights, {n, k});
    check_contiguous(op, {&ids, &weights, &logits});
    LLAISYS_CHECK_ARG(k >= 1 && k <= E, op, ": k (ids.shape[1] = ", k, ") must be in [1, E = ", E, "]");
    cpu::moe_topk(reinterpret_cast<int32_t *>(ids.data()), f32(weights), f32(logits), n, E, k, norm_topk_prob);
}

void moe_experts(Tensor &out, const Tensor &x, const Tensor &ids, const Tensor &weights, const Tensor &gate_up,
                 const Tensor &down) {
    const char *op = "moe_experts";
    check_same_device(op, {&out, &x, &ids, &weights, &gate_up, &down});
    check_cpu(op, out);
    check_dtype(op, "out", out, kF32);
    check_dtype(op, "x", x, kF32);
    check_dtype(op, "ids", ids, LLAISYS_DTYPE_I32);
    check_dtype(op, "weights", weights, kF32);
    check_float(op, gate_up);
    check_same_dtype(op, {&gate_up, &down});
    check_ndim(op, "x", x, 2);
    check_ndim(op, "ids", ids, 2);
    check_ndim(op, "gate_up", gate_up, 3);
    const size_t n = x.shape()[0], H = x.shape()[1], k = ids.shape()[1], E = gate_up.shape()[0];
    LLAISYS_CHECK_ARG(gate_up.shape()[1] % 2 == 0, op, ": gate_up rows (", gate_up.shape()[1], ") must be even");
    const size_t Ie = gate_up.shape()[1] / 2;
    check_shape(op, "gate_up", gate_up, {E, 2 * Ie, H});
    check_shape(op, "down", down, {E, H, Ie});
    check_shape(op, "out", out, {n, H});
    check_shape(op, "ids", ids, {n, k});
    check_shape(op, "weights", weights, {n, k});
    check_contiguous(op, {&out, &x, &ids, &weights, &gate_up, &down});
    LLAISYS_CHECK_ARG(E > 0 && Ie > 0 && k >= 1 && k <= E, op, ": needs E > 0, Ie > 0 and k in [1, E]");
    const size_t nk = n * k;
    for (size_t i = 0; i < nk; i++) {
        LLAISYS_CHECK_ARG(i32(ids)[i] >= 0 && size_t(i32(ids)[i]) < E, op, ": ids[", i, "] = ", i32(ids)[i],
                          " is outside [0, ", E, ")");
    }
    std::vector<int32_t> offsets(E + 1), row_of(nk), pos(nk);
    cpu::moe_group(offsets.data(), row_of.data(), pos.data(), i32(ids), n, E, k);
    std::vector<float> xg(nk * H), eg(nk * 2 * Ie), act(nk * Ie), ey(nk * H);  // [n k, ...] in expert order
    cpu::moe_gather(xg.data(), f32(x), row_of.data(), nk, H);
    const size_t es = gate_up.element_size();
    auto grouped = [&](float *o, const float *in, const Tensor &w, size_t rows_w, size_t cols) {
        for (size_t e = 0; e < E; e++) {
            const size_t r0 = size_t(offsets[e]), rows = size_t(offsets[e + 1]) - r0;
            if (rows == 0) continue;  // an expert no row chose is never read
            auto packed = cpu::PackedWeight::pack(w.data() + e * rows_w * cols * es, w.dtype(), rows_w, cols);
            cpu::linear_packed(o + r0 * rows_w, in + r0 * cols, packed, nullptr, rows);
        }
    };
    grouped(eg.data(), xg.data(), gate_up, 2 * Ie, H);
    auto *b = reinterpret_cast<std::byte *>(eg.data());
    cpu::swiglu(reinterpret_cast<std::byte *>(act.data()), b, b + Ie * sizeof(float), kF32, nk, Ie, 2 * Ie, Ie);
    grouped(ey.data(), act.data(), down, H, Ie);
    cpu::moe_combine(f32(out), ey.data(), f32(weights), pos.data(), n, k, H);
}

}  // namespace llaisys::ops

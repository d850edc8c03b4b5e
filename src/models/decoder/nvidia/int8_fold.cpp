#include "int8_fold.hpp"

#include "../../../ops/linear/nvidia/quant_linear_nvidia.hpp"
#include "../../../ops/rms_norm/nvidia/rms_norm_nvidia.hpp"
#include "../../../ops/swiglu/nvidia/swiglu_nvidia.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace llaisys::models::nvidia {

namespace {
constexpr size_t kRows = ops::nvidia::kQuantGemvRows;
constexpr llaisysDataType_t kF32 = LLAISYS_DTYPE_F32;
}  // namespace

bool Int8Fold::enabled() {
    static const bool on = [] {
        const char *e = std::getenv("LLAISYS_INT8_PRODUCERS");
        return e && std::strcmp(e, "1") == 0;
    }();
    return on;
}

Int8Fold::Int8Fold(const Config &c, int device_id) : c_(c), id_(device_id), act_(LLAISYS_MEMORY_DEVICE, device_id) {
    if (!enabled()) return;
    k_ = std::max({c_.p.hidden_size, c_.q_dim, c_.any_dense ? c_.p.intermediate_size : size_t(0)});
    act_.reserve(d_offset() + kRows * k_ / 32 * sizeof(float));
}

size_t Int8Fold::d_offset() const { return (kRows * k_ + 255) / 256 * 256; }
int8_t *Int8Fold::q() { return reinterpret_cast<int8_t *>(act_.data()); }
float *Int8Fold::d() { return reinterpret_cast<float *>(act_.data() + d_offset()); }

bool Int8Fold::serves(const LinearWeight &w, size_t n) const {
    return k_ > 0 && !w.qrows.empty() && w.k <= k_ &&
           ops::nvidia::linear_quant_takes_int8(w.qrows.data(), w.qrows.size(), w.k, n);
}

void Int8Fold::norm_linear(float *out, const float *x, const Tensor &norm_w, const LinearWeight &w,
                           const Tensor *bias, size_t n, cudaStream_t stream) {
    of_ = nullptr;
    ops::nvidia::rms_norm_quant(q(), d(), x, norm_w.data(), c_.p.dtype, n, w.k, c_.p.rms_norm_eps, stream);
    ops::nvidia::linear_quant_int8(out, q(), d(), w.qrows.data(), w.qrows.size(), w.n, w.k,
                                   bias ? bias->data() : nullptr, bias ? bias->dtype() : kF32, n, false, id_, stream);
}

void Int8Fold::norm_linear_swiglu(float *out, float *gate_up, const float *x, const Tensor &norm_w,
                                  const LinearWeight &w, size_t n, size_t width, cudaStream_t stream) {
    norm_linear(gate_up, x, norm_w, w, nullptr, n, stream);
    if (width % 32 == 0 && width <= k_) {
        ops::nvidia::swiglu_quant(out, q(), d(), gate_up, gate_up + width, n, width, 2 * width, width, stream);
        of_ = out;
    } else {
        ops::nvidia::swiglu(reinterpret_cast<std::byte *>(out), reinterpret_cast<const std::byte *>(gate_up),
                            reinterpret_cast<const std::byte *>(gate_up + width), kF32, n, width, 2 * width, width,
                            stream);
    }
}

void Int8Fold::linear_residual(float *x, const float *in, const LinearWeight &w, size_t n, cudaStream_t stream) {
    if (of_ != in) ops::nvidia::quantize_act(q(), d(), in, n, w.k, stream);
    of_ = nullptr;
    ops::nvidia::linear_quant_int8(x, q(), d(), w.qrows.data(), w.qrows.size(), w.n, w.k, nullptr, kF32, n, true, id_,
                                   stream);
}

}  // namespace llaisys::models::nvidia

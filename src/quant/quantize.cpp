// The 32-element quantizers and the row drivers; the K-quants are in quantize_k.cpp.
#include "quantize.hpp"

#include "dequant.hpp"

#include <cmath>
#include <cstring>
#include <vector>

namespace llaisys::quant {

namespace {

// Q4_0 / Q5_0: d = (the value of largest magnitude, its first occurrence) / -half, q =
// trunc(x / d + half + 0.5) clamped to [0, 2 * half - 1]. An all-zero block gets d = 0 and
// every q = half (gguf-py's np.where(d == 0, 0, 1 / d)). The search starts at x[0], as
// gguf-py's argmax does: a block of signed zeros starting with -0 gets d = +0 (llama.cpp,
// starting from max = +0, stores -0 there; the only case where the two differ).
float signed_max_scale(const float *x, float half, float &id) {
    float amax = std::fabs(x[0]), max = x[0];
    for (size_t i = 1; i < kBlock32; i++) {
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
        }
    }
    const float d = max / -half;
    id = d != 0.0f ? 1.0f / d : 0.0f;
    return d;
}

// trunc(v) clamped to [0, top] for v >= 0 (small negative v, from rounding, give 0). A value
// out of any int's range (inf, NaN: a subnormal d makes 1 / d infinite) gives 0, as the x86
// float-to-int conversion behind gguf-py's astype and llama.cpp's casts does.
int trunc_level(float v, int top) { return v >= 0.0f && v < 2147483648.0f ? std::min(top, int(v)) : 0; }

// gguf-py's np_roundf (llama.cpp's roundf): round half away from zero, as an int8; out of
// range (inf, NaN) gives 0 as trunc_level says.
int8_t round_i8(float v) {
    const float r = std::round(v);
    return r >= -128.0f && r <= 127.0f ? int8_t(r) : int8_t(0);
}

}  // namespace

void quantize_block(const float *x, BlockQ4_0 &b) {
    float id;
    const float d = signed_max_scale(x, 8.0f, id);
    b.d = from_f32<fp16_t>(d);
    for (size_t i = 0; i < kBlock32 / 2; i++) {
        const float v0 = x[i] * id + 8.5f, v1 = x[i + kBlock32 / 2] * id + 8.5f;
        const int q0 = trunc_level(v0, 15), q1 = trunc_level(v1, 15);
        b.qs[i] = uint8_t(q0 | (q1 << 4));
    }
}

void quantize_block(const float *x, BlockQ5_0 &b) {
    float id;
    const float d = signed_max_scale(x, 16.0f, id);
    b.d = from_f32<fp16_t>(d);
    uint32_t qh = 0;
    for (size_t i = 0; i < kBlock32 / 2; i++) {
        const float v0 = x[i] * id + 16.5f, v1 = x[i + kBlock32 / 2] * id + 16.5f;
        const int q0 = trunc_level(v0, 31), q1 = trunc_level(v1, 31);
        b.qs[i] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        qh |= uint32_t(q0 >> 4) << i;
        qh |= uint32_t(q1 >> 4) << (i + kBlock32 / 2);
    }
    std::memcpy(b.qh, &qh, 4);  // little-endian, as GGUF stores it
}

void quantize_block(const float *x, BlockQ8_0 &b) {
    float amax = 0.0f;
    for (size_t i = 0; i < kBlock32; i++) amax = std::max(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b.d = from_f32<fp16_t>(d);
    for (size_t i = 0; i < kBlock32; i++) b.qs[i] = round_i8(x[i] * id);
}

namespace {

// Throws INVALID_ARGUMENT at the first NaN or Inf of x [k] (row `row`).
void check_finite(float v, size_t row, size_t i) {
    LLAISYS_CHECK_ARG(std::isfinite(v), "quantize: in[", row, ", ", i, "] = ", v,
                      " is not finite (quantized formats hold finite values only)");
}

// Q4_1, Q5_1, Q2_K, Q3_K, IQ4_XS and the i-quants run as GGUF files store them (their weights
// come quantized): no quantizer.
constexpr bool quantizes(llaisysDataType_t dt) {
    return dt == LLAISYS_DTYPE_Q4_0 || dt == LLAISYS_DTYPE_Q5_0 || dt == LLAISYS_DTYPE_Q8_0 || dt == LLAISYS_DTYPE_Q4_K ||
           dt == LLAISYS_DTYPE_Q5_K || dt == LLAISYS_DTYPE_Q6_K;
}

template <class B>
void row_of(const float *x, B *blocks, size_t nb) {
    if constexpr (quantizes(dtype_of<B>()))  // the others are refused by has_quantizer
        for (size_t b = 0; b < nb; b++) quantize_block(x + b * block_elems<B>(), blocks[b]);
}

void has_quantizer(llaisysDataType_t dt) {
    LLAISYS_CHECK(quantizes(dt), LLAISYS_STATUS_UNSUPPORTED, "quantize: no quantizer for ", dtype_name(dt),
                  " (its weights run as GGUF files store them); q4_0, q5_0, q8_0, q4_k, q5_k and q6_k have one");
}

}  // namespace

void quantize_row(const float *x, llaisysDataType_t dt, void *blocks, size_t k) {
    row_bytes(dt, k);  // validates dt and k
    has_quantizer(dt);
    for (size_t i = 0; i < k; i++) check_finite(x[i], 0, i);
    dispatch_quant(dt, [&](auto tag) {
        using B = decltype(tag);
        row_of(x, static_cast<B *>(blocks), k / block_elems<B>());
    });
}

void quantize_rows(const void *in, llaisysDataType_t idt, void *blocks, llaisysDataType_t dt, size_t rows,
                   size_t k) {
    const size_t rb = row_bytes(dt, k);
    has_quantizer(dt);
    dispatch_float(idt, [&](auto itag) {
        using T = decltype(itag);
        const T *src = static_cast<const T *>(in);
        // Check every value first, so a bad input leaves the output untouched.
        for (size_t r = 0; r < rows; r++) {
            for (size_t i = 0; i < k; i++) check_finite(to_f32(src[r * k + i]), r, i);
        }
        dispatch_quant(dt, [&](auto tag) {
            using B = decltype(tag);
            auto *dst = static_cast<std::byte *>(blocks);
#pragma omp parallel for schedule(static) if (rows * k > (1 << 14))
            for (ptrdiff_t r = 0; r < ptrdiff_t(rows); r++) {
                std::vector<float> row;  // [k] this row in f32 (f16 / bf16 input)
                const float *x;
                if constexpr (std::is_same_v<T, float>) {
                    x = src + size_t(r) * k;
                } else {
                    row.resize(k);
                    for (size_t i = 0; i < k; i++) row[i] = to_f32(src[size_t(r) * k + i]);
                    x = row.data();
                }
                row_of(x, reinterpret_cast<B *>(dst + size_t(r) * rb), k / block_elems<B>());
            }
        });
    });
}

}  // namespace llaisys::quant

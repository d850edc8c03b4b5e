// Element types: the 16-bit float storage types and conversions to and from f32.
// Conversions round to nearest even, as torch's .to(dtype) does.
#pragma once

#include "error.hpp"
#include "llaisys.h"

#include <cstdint>
#include <cstring>

namespace llaisys {

struct bf16_t {
    uint16_t bits;
};
struct fp16_t {
    uint16_t bits;
};

inline uint32_t f32_bits(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    return u;
}
inline float f32_from_bits(uint32_t u) {
    float x;
    std::memcpy(&x, &u, 4);
    return x;
}

inline float to_f32(float x) { return x; }
inline float to_f32(bf16_t x) { return f32_from_bits(uint32_t(x.bits) << 16); }
inline float to_f32(fp16_t h) {
    uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
    uint32_t exp = (h.bits >> 10) & 0x1fu;
    uint32_t mant = h.bits & 0x3ffu;
    if (exp == 0) {
        if (mant == 0) return f32_from_bits(sign);
        // subnormal: renormalise
        uint32_t e = 127 - 15 + 1;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        return f32_from_bits(sign | (e << 23) | ((mant & 0x3ffu) << 13));
    }
    if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
    return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

template <class T>
T from_f32(float x);

template <>
inline float from_f32<float>(float x) { return x; }

template <>
inline bf16_t from_f32<bf16_t>(float x) {
    uint32_t u = f32_bits(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{uint16_t((u >> 16) | 0x40u)};  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return bf16_t{uint16_t(u >> 16)};
}

template <>
inline fp16_t from_f32<fp16_t>(float x) {
    const uint32_t f32_inf = 255u << 23;
    const uint32_t f16_max = (127u + 16u) << 23;  // 65536.0f: everything at or above is inf
    const uint32_t denorm_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    uint32_t f = f32_bits(x);
    uint32_t sign = f & 0x80000000u;
    f ^= sign;
    uint16_t o;
    if (f >= f16_max) {
        o = f > f32_inf ? 0x7e00 : 0x7c00;
    } else if (f < (113u << 23)) {
        // result is subnormal or zero: let the FPU round by adding a magic number
        o = uint16_t(f32_bits(f32_from_bits(f) + f32_from_bits(denorm_magic)) - denorm_magic);
    } else {
        uint32_t mant_odd = (f >> 13) & 1u;
        f += (uint32_t(15 - 127) << 23) + 0xfffu;
        f += mant_odd;
        o = uint16_t(f >> 13);
    }
    return fp16_t{uint16_t(o | (sign >> 16))};
}

inline size_t dtype_size(llaisysDataType_t dt) {
    switch (dt) {
    case LLAISYS_DTYPE_F32: return 4;
    case LLAISYS_DTYPE_F16: return 2;
    case LLAISYS_DTYPE_BF16: return 2;
    case LLAISYS_DTYPE_I32: return 4;
    case LLAISYS_DTYPE_I64: return 8;
    case LLAISYS_DTYPE_U8: return 1;
    case LLAISYS_DTYPE_I8: return 1;
    case LLAISYS_DTYPE_F64: return 8;
    case LLAISYS_DTYPE_BOOL: return 1;
    default: return 0;
    }
}

inline const char *dtype_name(llaisysDataType_t dt) {
    switch (dt) {
    case LLAISYS_DTYPE_F32: return "f32";
    case LLAISYS_DTYPE_F16: return "f16";
    case LLAISYS_DTYPE_BF16: return "bf16";
    case LLAISYS_DTYPE_I32: return "i32";
    case LLAISYS_DTYPE_I64: return "i64";
    case LLAISYS_DTYPE_U8: return "u8";
    case LLAISYS_DTYPE_I8: return "i8";
    case LLAISYS_DTYPE_F64: return "f64";
    case LLAISYS_DTYPE_BOOL: return "bool";
    case LLAISYS_DTYPE_Q4_0: return "q4_0";
    case LLAISYS_DTYPE_Q4_1: return "q4_1";
    case LLAISYS_DTYPE_Q5_0: return "q5_0";
    case LLAISYS_DTYPE_Q5_1: return "q5_1";
    case LLAISYS_DTYPE_Q8_0: return "q8_0";
    case LLAISYS_DTYPE_Q2_K: return "q2_k";
    case LLAISYS_DTYPE_Q3_K: return "q3_k";
    case LLAISYS_DTYPE_Q4_K: return "q4_k";
    case LLAISYS_DTYPE_Q5_K: return "q5_k";
    case LLAISYS_DTYPE_Q6_K: return "q6_k";
    case LLAISYS_DTYPE_IQ4_XS: return "iq4_xs";
    case LLAISYS_DTYPE_IQ2_XXS: return "iq2_xxs";
    case LLAISYS_DTYPE_IQ2_XS: return "iq2_xs";
    case LLAISYS_DTYPE_IQ2_S: return "iq2_s";
    case LLAISYS_DTYPE_IQ3_XXS: return "iq3_xxs";
    case LLAISYS_DTYPE_IQ3_S: return "iq3_s";
    case LLAISYS_DTYPE_IQ1_S: return "iq1_s";
    case LLAISYS_DTYPE_IQ1_M: return "iq1_m";
    default: return "invalid";
    }
}

// Block-quantized dtypes (GGUF layouts, src/quant/blocks.hpp): elements per block and bytes
// per block; 0 and 0 for every other dtype.
inline size_t quant_block_size(llaisysDataType_t dt) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_0:
    case LLAISYS_DTYPE_Q4_1:
    case LLAISYS_DTYPE_Q5_0:
    case LLAISYS_DTYPE_Q5_1:
    case LLAISYS_DTYPE_Q8_0: return 32;
    case LLAISYS_DTYPE_Q2_K:
    case LLAISYS_DTYPE_Q3_K:
    case LLAISYS_DTYPE_Q4_K:
    case LLAISYS_DTYPE_Q5_K:
    case LLAISYS_DTYPE_Q6_K:
    case LLAISYS_DTYPE_IQ4_XS:
    case LLAISYS_DTYPE_IQ2_XXS:
    case LLAISYS_DTYPE_IQ2_XS:
    case LLAISYS_DTYPE_IQ2_S:
    case LLAISYS_DTYPE_IQ3_XXS:
    case LLAISYS_DTYPE_IQ3_S:
    case LLAISYS_DTYPE_IQ1_S:
    case LLAISYS_DTYPE_IQ1_M: return 256;
    default: return 0;
    }
}

inline size_t quant_block_bytes(llaisysDataType_t dt) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_0: return 18;
    case LLAISYS_DTYPE_Q4_1: return 20;
    case LLAISYS_DTYPE_Q5_0: return 22;
    case LLAISYS_DTYPE_Q5_1: return 24;
    case LLAISYS_DTYPE_Q8_0: return 34;
    case LLAISYS_DTYPE_Q2_K: return 84;
    case LLAISYS_DTYPE_Q3_K: return 110;
    case LLAISYS_DTYPE_Q4_K: return 144;
    case LLAISYS_DTYPE_Q5_K: return 176;
    case LLAISYS_DTYPE_Q6_K: return 210;
    case LLAISYS_DTYPE_IQ4_XS: return 136;
    case LLAISYS_DTYPE_IQ2_XXS: return 66;
    case LLAISYS_DTYPE_IQ2_XS: return 74;
    case LLAISYS_DTYPE_IQ2_S: return 82;
    case LLAISYS_DTYPE_IQ3_XXS: return 98;
    case LLAISYS_DTYPE_IQ3_S: return 110;
    case LLAISYS_DTYPE_IQ1_S: return 50;
    case LLAISYS_DTYPE_IQ1_M: return 56;
    default: return 0;
    }
}

inline bool is_quant_dtype(llaisysDataType_t dt) { return quant_block_size(dt) != 0; }

// The block-quantized dtypes, for error messages.
constexpr const char *kQuantDtypeNames =
    "q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k, iq4_xs, iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, "
    "iq1_s, iq1_m";

inline bool is_float_dtype(llaisysDataType_t dt) {
    return dt == LLAISYS_DTYPE_F32 || dt == LLAISYS_DTYPE_F16 || dt == LLAISYS_DTYPE_BF16;
}

// Call f(T{}) with T the storage type of a floating dtype (float, fp16_t, bf16_t).
template <class F>
void dispatch_float(llaisysDataType_t dt, F &&f) {
    switch (dt) {
    case LLAISYS_DTYPE_F32: f(float{}); return;
    case LLAISYS_DTYPE_F16: f(fp16_t{}); return;
    case LLAISYS_DTYPE_BF16: f(bf16_t{}); return;
    default: fail(LLAISYS_STATUS_UNSUPPORTED, "dtype ", dtype_name(dt), " is not supported here (f32, f16, bf16 are)");
    }
}

}  // namespace llaisys

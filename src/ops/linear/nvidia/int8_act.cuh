// The int8 GEMVs' activation format (quant_gemv_int8.cuh, quant_linear_nvidia.hpp's Int8Act):
// blocks of kXBlock = 32 values, each an int8 q = round(v * 127 / amax) (to nearest even) and
// one f32 scale d = amax / 127 a block; a block holding a NaN or an infinity gets q = 0 and a NaN
// scale, so its products are NaN, as the float path's. Shared by the quantizer before a linear
// and the producers that write this format directly (rms_norm_quant, swiglu_quant), so that
// both give the same bits.
#pragma once

#include "../../../device/nvidia/cuda_kernel_utils.cuh"

#include <cstdint>

namespace llaisys::ops::nvidia {

constexpr int kXBlock = 32;  // activation elements per int8 scale

// Programmatic dependent launch (sm_90 and later; nothing before, nor after an ordinary
// launch): a producer lets the pipelined GEMV's blocks start at once, and they issue their
// first weight loads before waiting for the producer's grid to end, its writes visible.
__device__ __forceinline__ void pdl_launch_dependents() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// One block of 32 activations, lane i of a whole warp holding value i: q[i], and *d by lane 0.
__device__ __forceinline__ void quantize32(int8_t *q, float *d, float v, unsigned lane) {
    const float amax = device::nvidia::warp_max(fabsf(v));
    const bool bad = __any_sync(0xffffffffu, !isfinite(v));
    const float dd = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    q[lane] = bad ? int8_t(0) : int8_t(__float2int_rn(v * id));
    if (lane == 0) *d = bad ? __int_as_float(0x7fc00000) : dd;
}

}  // namespace llaisys::ops::nvidia

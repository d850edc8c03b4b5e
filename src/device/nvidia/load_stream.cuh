// The streaming weight load of the GEMV kernels (gemv16, the int8 GEMV): 16 bytes from global
// memory through the read-only path without allocating in L1, since each weight byte is read
// once a step while the activations beside it are read by every warp and should keep L1.
#pragma once

#include <cuda_runtime.h>

namespace llaisys::device::nvidia {

// asm volatile: a guarded load is never speculated past its guard.
__device__ __forceinline__ uint4 load_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

}  // namespace llaisys::device::nvidia

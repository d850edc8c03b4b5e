#include "kv_write_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

// One block per token (grid-stride over tokens); threads across the K and V row.
template <class TK, class TA>
__global__ void kv_write_kernel(TK *k_cache, TK *v_cache, const TA *rows, size_t row_stride, size_t k_off,
                                size_t v_off, const int64_t *slots, size_t n, size_t row_elems) {
    for (size_t t = blockIdx.x; t < n; t += gridDim.x) {
        const int64_t slot = slots[t];
        if (slot < 0) continue;
        const TA *src = rows + t * row_stride;
        TK *kd = k_cache + size_t(slot) * row_elems, *vd = v_cache + size_t(slot) * row_elems;
        for (size_t e = threadIdx.x; e < row_elems; e += blockDim.x) {
            kd[e] = from_float<TK>(to_float(src[k_off + e]));
            vd[e] = from_float<TK>(to_float(src[v_off + e]));
        }
    }
}

}  // namespace

void kv_write(std::byte *k_cache, std::byte *v_cache, llaisysDataType_t kvdt, const std::byte *rows,
              llaisysDataType_t act, size_t row_stride, size_t k_off, size_t v_off, const int64_t *slots,
              size_t n, size_t row_elems, cudaStream_t stream) {
    if (n == 0 || row_elems == 0) return;
    const unsigned threads = row_threads(row_elems);
    const unsigned blocks = row_blocks(n);
    dispatch_float(kvdt, [&](auto ktag) {
        using TK = decltype(ktag);
        dispatch_float(act, [&](auto atag) {
            using TA = decltype(atag);
            kv_write_kernel<TK, TA><<<blocks, threads, 0, stream>>>(
                reinterpret_cast<TK *>(k_cache), reinterpret_cast<TK *>(v_cache), reinterpret_cast<const TA *>(rows),
                row_stride, k_off, v_off, slots, n, row_elems);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia

// One block per row (grid-stride over rows). Each thread keeps the best (value, index) of its
// strided columns, then warp shuffles and a shared array reduce the pairs. "Better" is the
// CPU's order made associative: NaN beats every number, equal values (or two NaNs) go to the
// smaller index, so the result is the first NaN if there is one, else the first maximum.
#include "argmax_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

constexpr uint64_t kNone = ~uint64_t(0);  // an index no real column has: loses every tie

// Whether (bv, bi) should replace (av, ai).
__device__ __forceinline__ bool better(float bv, uint64_t bi, float av, uint64_t ai) {
    const bool bn = isnan(bv), an = isnan(av);
    if (bn != an) return bn;
    if (bn || bv == av) return bi < ai;
    return bv > av;
}

template <class T>
__global__ void argmax_kernel(int64_t *max_idx, T *max_val, const T *vals, size_t rows, size_t n) {
    __shared__ float s_val[32];
    __shared__ uint64_t s_idx[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x + 31) >> 5;
    for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *row = vals + r * n;
        float bv = -INFINITY;
        uint64_t bi = kNone;
        for (size_t j = threadIdx.x; j < n; j += blockDim.x) {
            const float x = to_float(row[j]);
            if (better(x, j, bv, bi)) bv = x, bi = j;
        }
        for (int off = 16; off > 0; off >>= 1) {
            const float ov = __shfl_xor_sync(kFullMask, bv, off);
            const uint64_t oi = __shfl_xor_sync(kFullMask, bi, off);
            if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
        }
        if (lane == 0) s_val[warp] = bv, s_idx[warp] = bi;
        __syncthreads();
        if (warp == 0) {
            bv = lane < n_warps ? s_val[lane] : -INFINITY;
            bi = lane < n_warps ? s_idx[lane] : kNone;
            for (int off = 16; off > 0; off >>= 1) {
                const float ov = __shfl_xor_sync(kFullMask, bv, off);
                const uint64_t oi = __shfl_xor_sync(kFullMask, bi, off);
                if (better(ov, oi, bv, bi)) bv = ov, bi = oi;
            }
            if (lane == 0) {  // n >= 1, so some real column won
                max_idx[r] = int64_t(bi);
                max_val[r] = row[bi];  // the element's own bits, as the CPU copies them
            }
        }
        __syncthreads();  // s_val / s_idx are reused by the next row
    }
}

}  // namespace

void argmax(int64_t *max_idx, std::byte *max_val, const std::byte *vals, llaisysDataType_t dtype, size_t rows,
            size_t n, cudaStream_t stream) {
    if (rows == 0 || n == 0) return;
    const unsigned threads = n >= 1024 ? 1024 : 32 * unsigned(ceil_div(n, 32));
    const unsigned blocks = row_blocks(rows);
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        argmax_kernel<T><<<blocks, threads, 0, stream>>>(max_idx, reinterpret_cast<T *>(max_val),
                                                         reinterpret_cast<const T *>(vals), rows, n);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia

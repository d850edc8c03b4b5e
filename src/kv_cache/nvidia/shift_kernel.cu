// Key re-rotation on a GPU: seq_add's (SLOT, rotate_cells) and copy_shift's (BLOCK, copy_shift).
// One block per (layer, cell or entry) pair (grid-stride over all of them); the threads walk the
// (head, j < d/2) pairs of the row. The math is the CPU's (ops/rope/cpu/rope_cpu.cpp) with
// pos = delta: angle = float(delta) * inv_freq[j] in f32, then the rotation of the pair
// (x[j], x[j + d/2]), both read before either is written.
#include "shift_kernel.hpp"

#include "../../device/nvidia/cuda_check.hpp"
#include "../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::kv::nvidia {
namespace {

using namespace llaisys::device::nvidia;

// out [heads, d] = in rotated by pos positions, this block's threads over the (head, j) pairs;
// out may be in (each pair is read before it is written, by the thread that writes it).
template <class T>
__device__ __forceinline__ void rotate_row(const T *in, T *out, size_t heads, size_t d, const float *inv_freq,
                                           float pos) {
    const size_t half = d / 2;
    for (size_t e = threadIdx.x; e < heads * half; e += blockDim.x) {
        const size_t h = e / half, j = e % half;
        float s, c;
        sincosf(pos * inv_freq[j], &s, &c);
        const float x1 = to_float(in[h * d + j]), x2 = to_float(in[h * d + j + half]);
        out[h * d + j] = from_float<T>(x1 * c - x2 * s);
        out[h * d + j + half] = from_float<T>(x2 * c + x1 * s);
    }
}

template <class T>
__global__ void rotate_cells_kernel(T *k, size_t n_layers, size_t layer_stride, const int32_t *cells, size_t n_cells,
                                    size_t heads, size_t d, const float *inv_freq, float pos) {
    for (size_t pair = blockIdx.x; pair < n_layers * n_cells; pair += gridDim.x) {
        const size_t layer = pair / n_cells, cell = size_t(cells[pair % n_cells]);
        T *row = k + layer * layer_stride + cell * heads * d;  // [heads, d]
        rotate_row(row, row, heads, d, inv_freq, pos);
    }
}

// The V row copied as is; the K row copied as is for delta 0 (as the CPU's memcpy), else
// rotated on the way (the CPU copies, then rotates in place: the same values).
template <class T>
__global__ void copy_shift_kernel(T *k, T *v, size_t n_layers, size_t layer_stride, const int32_t *src,
                                  const int32_t *dst, const int64_t *delta, size_t n, size_t heads, size_t d,
                                  const float *inv_freq) {
    const size_t row = heads * d;
    for (size_t pair = blockIdx.x; pair < n_layers * n; pair += gridDim.x) {
        const size_t layer = pair / n, i = pair % n;
        const size_t from = layer * layer_stride + size_t(src[i]) * row;
        const size_t to = layer * layer_stride + size_t(dst[i]) * row;
        for (size_t e = threadIdx.x; e < row; e += blockDim.x) v[to + e] = v[from + e];
        const int64_t shift = delta[i];
        if (shift == 0) {
            for (size_t e = threadIdx.x; e < row; e += blockDim.x) k[to + e] = k[from + e];
        } else {
            rotate_row(k + from, k + to, heads, d, inv_freq, float(shift));
        }
    }
}

}  // namespace

void rotate_cells(std::byte *k, llaisysDataType_t dtype, size_t n_layers, size_t layer_stride, const int32_t *cells,
                  size_t n_cells, size_t heads, size_t d, const float *inv_freq, int64_t delta, cudaStream_t stream) {
    if (n_layers == 0 || n_cells == 0 || heads == 0 || d < 2) return;
    const unsigned threads = row_threads(heads * (d / 2));
    const unsigned blocks = row_blocks(n_layers * n_cells);
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        rotate_cells_kernel<T><<<blocks, threads, 0, stream>>>(reinterpret_cast<T *>(k), n_layers, layer_stride, cells,
                                                               n_cells, heads, d, inv_freq, float(delta));
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

void copy_shift(std::byte *k, std::byte *v, llaisysDataType_t dtype, size_t n_layers, size_t layer_stride,
                const int32_t *src, const int32_t *dst, const int64_t *delta, size_t n, size_t heads, size_t d,
                const float *inv_freq, cudaStream_t stream) {
    if (n_layers == 0 || n == 0 || heads == 0 || d < 2) return;
    const unsigned threads = row_threads(heads * d);
    const unsigned blocks = row_blocks(n_layers * n);
    dispatch_float(dtype, [&](auto tag) {
        using T = decltype(tag);
        copy_shift_kernel<T><<<blocks, threads, 0, stream>>>(reinterpret_cast<T *>(k), reinterpret_cast<T *>(v),
                                                             n_layers, layer_stride, src, dst, delta, n, heads, d,
                                                             inv_freq);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::kv::nvidia

// One block per (layer, cell) pair (grid-stride over all of them); the threads walk the
// (head, j < d/2) pairs of the row. The math is the CPU's (ops/rope/cpu/rope_cpu.cpp) with
// pos = delta: angle = float(delta) * inv_freq[j] in f32, then the rotation of the pair
// (x[j], x[j + d/2]), both read before either is written.
#include "shift_kernel.hpp"

#include "../../device/nvidia/cuda_check.hpp"
#include "../../device/nvidia/cuda_kernel_utils.cuh"

namespace llaisys::kv::nvidia {
namespace {

using namespace llaisys::device::nvidia;

template <class T>
__global__ void rotate_cells_kernel(T *k, size_t n_layers, size_t layer_stride, const int32_t *cells, size_t n_cells,
                                    size_t heads, size_t d, const float *inv_freq, float pos) {
    const size_t half = d / 2;
    for (size_t pair = blockIdx.x; pair < n_layers * n_cells; pair += gridDim.x) {
        const size_t layer = pair / n_cells, cell = size_t(cells[pair % n_cells]);
        T *row = k + layer * layer_stride + cell * heads * d;  // [heads, d]
        for (size_t e = threadIdx.x; e < heads * half; e += blockDim.x) {
            const size_t h = e / half, j = e % half;
            float s, c;
            sincosf(pos * inv_freq[j], &s, &c);
            T *x = row + h * d;
            const float x1 = to_float(x[j]), x2 = to_float(x[j + half]);
            x[j] = from_float<T>(x1 * c - x2 * s);
            x[j + half] = from_float<T>(x2 * c + x1 * s);
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

}  // namespace llaisys::kv::nvidia

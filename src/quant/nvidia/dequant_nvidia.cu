// Dequantization on the device: one thread per eight elements (dequant_block.cuh), rows
// gathered through an optional index array.
#include "dequant_nvidia.hpp"

#include "../../device/nvidia/cuda_check.hpp"
#include "../dequant.hpp"
#include "dequant_block.cuh"

namespace llaisys::quant::nvidia {
namespace {

using device::nvidia::from_float;
using device::nvidia::grid_for;

constexpr unsigned kThreads = 256;

// Groups of eight: group g is elements [8 g, 8 g + 8) of out [rows, k]; per row k / 8 groups.
template <class B, class TO>
__global__ void dequantize_kernel(TO *out, const B *table, const int64_t *ids, size_t row0, size_t rows,
                                  size_t nb) {  // table [*, nb] blocks; out [rows, nb * block]
    constexpr int kGroups = kGroupsPerBlock<B>;  // groups per block
    const size_t groups_per_row = nb * kGroups, total = rows * groups_per_row;
    for (size_t g = size_t(blockIdx.x) * blockDim.x + threadIdx.x; g < total; g += size_t(gridDim.x) * blockDim.x) {
        const size_t r = g / groups_per_row, in_row = g % groups_per_row;
        const size_t src_row = ids ? size_t(ids[r]) : row0 + r;
        const B &blk = table[src_row * nb + in_row / kGroups];
        float v[8];
        dequant8(blk, int(in_row % kGroups) * 8, v);
        TO *dst = out + g * 8;
#pragma unroll
        for (int t = 0; t < 8; t++) dst[t] = from_float<TO>(v[t]);
    }
}

}  // namespace

void dequantize_rows(void *out, llaisysDataType_t odt, const void *table, llaisysDataType_t qdt, size_t rows,
                     size_t k, const int64_t *ids, size_t row0, cudaStream_t stream) {
    row_bytes(qdt, k);  // validates qdt and k
    const size_t nb = k / quant_block_size(qdt);
    if (rows == 0 || k == 0) return;
    dispatch_float(odt, [&](auto otag) {
        using TO = decltype(otag);
        dispatch_quant(qdt, [&](auto tag) {
            using B = decltype(tag);
            dequantize_kernel<B, TO><<<grid_for(rows * (k / 8), kThreads), kThreads, 0, stream>>>(
                static_cast<TO *>(out), static_cast<const B *>(table), ids, row0, rows, nb);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::quant::nvidia

#include "embedding_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

#include <type_traits>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

// One block per output row (grid-stride over rows), threads across the row.
template <class TO, class TW>
__global__ void embedding_kernel(TO *out, const int64_t *index, const TW *weight, size_t n, size_t vocab, size_t d) {
    for (size_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int64_t id = index[i];
        const bool valid = id >= 0 && uint64_t(id) < vocab;
        const TW *src = weight + (valid ? size_t(id) : 0) * d;
        TO *dst = out + i * d;
        for (size_t j = threadIdx.x; j < d; j += blockDim.x) {
            if constexpr (std::is_same_v<TO, TW>) dst[j] = valid ? src[j] : TO{};  // raw bits, as the CPU's memcpy
            else dst[j] = from_float<TO>(valid ? to_float(src[j]) : 0.0f);
        }
    }
}

}  // namespace

void embedding(std::byte *out, llaisysDataType_t odt, const int64_t *index, const std::byte *weight,
               llaisysDataType_t wdt, size_t n, size_t vocab, size_t d, cudaStream_t stream) {
    if (n == 0 || d == 0) return;
    const unsigned threads = row_threads(d);
    const unsigned blocks = row_blocks(n);
    dispatch_float(odt, [&](auto otag) {
        using TO = decltype(otag);
        dispatch_float(wdt, [&](auto wtag) {
            using TW = decltype(wtag);
            embedding_kernel<TO, TW><<<blocks, threads, 0, stream>>>(reinterpret_cast<TO *>(out), index,
                                                                    reinterpret_cast<const TW *>(weight), n, vocab, d);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia

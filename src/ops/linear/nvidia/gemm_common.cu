#include "gemm_common.hpp"

#include "../../../core/allocator.hpp"
#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"

#include <vector>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

constexpr unsigned kThreads = 256;

template <class TD, class TS>
__global__ void convert_kernel(TD *dst, const TS *src, size_t count) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        dst[i] = from_float<TD>(to_float(src[i]));
    }
}

struct ThreadState {
    std::vector<DeviceState> devices;  // indexed by device id
    ~ThreadState() {
        for (size_t id = 0; id < devices.size(); id++) {
            DeviceState &s = devices[id];
            try {  // a destructor must not throw; at process exit CUDA may be gone already
                if (s.scratch) core::release(LLAISYS_DEVICE_NVIDIA, int(id), LLAISYS_MEMORY_DEVICE, s.scratch);
                if (s.handle) (void)cublas::api().destroy(s.handle);
            } catch (...) {
            }
        }
    }
};

}  // namespace

namespace {

DeviceState &state_of(int device_id) {  // without a cuBLAS handle
    thread_local ThreadState ts;
    if (ts.devices.size() <= size_t(device_id)) ts.devices.resize(size_t(device_id) + 1);
    return ts.devices[size_t(device_id)];
}

}  // namespace

DeviceState &device_state(int device_id) {
    DeviceState &s = state_of(device_id);
    if (!s.handle) {
        const cublas::Api &api = cublas::api();
        cublas::check(api.create(&s.handle), "cublasCreate");
        cublas::check(api.set_math_mode(s.handle, cublas::kDefaultMath), "cublasSetMathMode");
    }
    return s;
}

std::byte *scratch(DeviceState &s, int device_id, size_t bytes) {
    if (bytes <= s.scratch_bytes) return s.scratch;
    LLAISYS_CUDA_CHECK(cudaDeviceSynchronize());  // earlier launches may still read the old buffer
    if (s.scratch) core::release(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, s.scratch);
    s.scratch = nullptr;
    s.scratch_bytes = 0;
    const size_t grown = bytes + bytes / 2;
    s.scratch = static_cast<std::byte *>(core::allocate(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, grown));
    s.scratch_bytes = grown;
    return s.scratch;
}

std::byte *thread_scratch(int device_id, size_t bytes) { return scratch(state_of(device_id), device_id, bytes); }

void convert_dtype(void *dst, llaisysDataType_t ddt, const void *src, llaisysDataType_t sdt, size_t count,
                   cudaStream_t stream) {
    if (count == 0) return;
    dispatch_float(ddt, [&](auto dtag) {
        dispatch_float(sdt, [&](auto stag) {
            using TD = decltype(dtag);
            using TS = decltype(stag);
            convert_kernel<TD, TS><<<grid_for(count, kThreads), kThreads, 0, stream>>>(
                static_cast<TD *>(dst), static_cast<const TS *>(src), count);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia

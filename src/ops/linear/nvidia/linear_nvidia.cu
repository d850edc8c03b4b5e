// cuBLAS is column-major. Row-major out [m, n] is column-major out^T [n, m] (ld n), weight
// [n, k] is column-major W^T [k, n] (ld k), in [m, k] is in^T [k, m] (ld k), so
//   out^T = op_T(W^T) x in^T  ->  GemmEx(T, N, M = n, N = m, K = k, A = weight, B = in, C = out).
#include "linear_nvidia.hpp"

#include "../../../core/allocator.hpp"
#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "cublas_loader.hpp"

#include <climits>
#include <vector>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

template <class TD, class TS>
__global__ void convert_kernel(TD *dst, const TS *src, size_t count) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += size_t(gridDim.x) * blockDim.x) {
        dst[i] = from_float<TD>(to_float(src[i]));
    }
}

// out [m, n] = round(acc [m, n] + bias [n]); acc may be out itself (f32), bias may be null.
template <class TO, class TB>
__global__ void bias_kernel(TO *out, const float *acc, const TB *bias, size_t m, size_t n) {
    const size_t total = m * n;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
        out[i] = from_float<TO>(acc[i] + (bias ? to_float(bias[i % n]) : 0.0f));
    }
}

constexpr unsigned kThreads = 256;

template <class TD, class TS>
void convert(void *dst, const void *src, size_t count, cudaStream_t stream) {
    convert_kernel<TD, TS><<<grid_for(count, kThreads), kThreads, 0, stream>>>(static_cast<TD *>(dst),
                                                                             static_cast<const TS *>(src), count);
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

void convert_dtype(void *dst, llaisysDataType_t ddt, const void *src, llaisysDataType_t sdt, size_t count,
                   cudaStream_t stream) {
    dispatch_float(ddt, [&](auto dtag) {
        dispatch_float(sdt, [&](auto stag) { convert<decltype(dtag), decltype(stag)>(dst, src, count, stream); });
    });
}

cudaDataType_t cuda_type(llaisysDataType_t dt) {
    switch (dt) {
    case LLAISYS_DTYPE_F32: return CUDA_R_32F;
    case LLAISYS_DTYPE_F16: return CUDA_R_16F;
    case LLAISYS_DTYPE_BF16: return CUDA_R_16BF;
    default: fail(LLAISYS_STATUS_UNSUPPORTED, "linear: dtype ", dtype_name(dt), " is not supported on NVIDIA");
    }
}

// What one thread keeps per device: its cuBLAS handle and its scratch buffer.
struct DeviceState {
    cublas::Handle handle = nullptr;
    std::byte *scratch = nullptr;  // device memory from core::allocate
    size_t scratch_bytes = 0;
};

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

DeviceState &state(int device_id) {
    thread_local ThreadState ts;
    if (ts.devices.size() <= size_t(device_id)) ts.devices.resize(size_t(device_id) + 1);
    DeviceState &s = ts.devices[size_t(device_id)];
    if (!s.handle) {
        const cublas::Api &api = cublas::api();
        cublas::check(api.create(&s.handle), "cublasCreate");
        cublas::check(api.set_math_mode(s.handle, cublas::kDefaultMath), "cublasSetMathMode");
    }
    return s;
}

// A scratch buffer of at least `bytes` on this thread's state for device_id.
std::byte *scratch(DeviceState &s, int device_id, size_t bytes) {
    if (bytes <= s.scratch_bytes) return s.scratch;
    // Earlier launches (on any stream of this thread) may still read the old buffer.
    LLAISYS_CUDA_CHECK(cudaDeviceSynchronize());
    if (s.scratch) core::release(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, s.scratch);
    s.scratch = nullptr;
    s.scratch_bytes = 0;
    const size_t grown = bytes + bytes / 2;
    s.scratch = static_cast<std::byte *>(core::allocate(LLAISYS_DEVICE_NVIDIA, device_id, LLAISYS_MEMORY_DEVICE, grown));
    s.scratch_bytes = grown;
    return s.scratch;
}

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

}  // namespace

void linear(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
            const std::byte *bias, llaisysDataType_t wdt, size_t m, size_t n, size_t k,
            int device_id, cudaStream_t stream) {
    if (m == 0 || n == 0) return;
    LLAISYS_CHECK(m <= size_t(INT_MAX) && n <= size_t(INT_MAX) && k <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED,
                  "linear: [", m, ", ", k, "] x [", n, ", ", k, "]^T exceeds cuBLAS's 32-bit sizes");
    DeviceState &st = state(device_id);
    const cublas::Api &api = cublas::api();
    cublas::check(api.set_stream(st.handle, stream), "cublasSetStream");

    // Operand dtype of the GEMM, whether `in` / `weight` must be converted to it, and
    // whether the product goes to an f32 scratch (then rounded to act with the bias).
    llaisysDataType_t gdt = wdt;
    bool conv_w = false;
    if (act != LLAISYS_DTYPE_F32 && act != wdt) {  // 16-bit activations over other weights
        gdt = LLAISYS_DTYPE_F32;
        conv_w = wdt != LLAISYS_DTYPE_F32;
    }
    const bool conv_in = act != gdt;
    const bool f32_out = act == LLAISYS_DTYPE_F32;
    const bool acc_scratch = !f32_out && (bias || act != gdt);  // product in f32, then rounded once

    const size_t in_bytes = conv_in ? align_up(m * k * dtype_size(gdt)) : 0;
    const size_t w_bytes = conv_w ? align_up(n * k * dtype_size(gdt)) : 0;
    const size_t acc_bytes = acc_scratch ? align_up(m * n * sizeof(float)) : 0;
    std::byte *buf = (in_bytes + w_bytes + acc_bytes) ? scratch(st, device_id, in_bytes + w_bytes + acc_bytes) : nullptr;
    const void *a_ptr = weight, *b_ptr = in;
    if (conv_w && k > 0) {
        convert_dtype(buf + in_bytes, gdt, weight, wdt, n * k, stream);
        a_ptr = buf + in_bytes;
    }
    if (conv_in && k > 0) {
        convert_dtype(buf, gdt, in, act, m * k, stream);
        b_ptr = buf;
    }

    // C: out itself when it can hold the product (f32 out, or a 16-bit out without bias
    // and with 16-bit operands: cuBLAS rounds the f32 accumulator once), else f32 scratch.
    void *c_ptr = acc_scratch ? static_cast<void *>(buf + in_bytes + w_bytes) : static_cast<void *>(out);
    const cudaDataType_t ctype = acc_scratch ? CUDA_R_32F : cuda_type(act);
    const int compute = gdt == LLAISYS_DTYPE_F32 ? cublas::kCompute32FPedantic : cublas::kCompute32F;
    const float alpha = 1.0f, beta = 0.0f;
    if (k == 0) {  // an empty sum: the product is zero (cuBLAS rejects lda = 0)
        LLAISYS_CUDA_CHECK(cudaMemsetAsync(c_ptr, 0, m * n * (acc_scratch ? sizeof(float) : dtype_size(act)), stream));
    } else {
        cublas::check(api.gemm_ex(st.handle, cublas::kOpT, cublas::kOpN, int(n), int(m), int(k), &alpha, a_ptr,
                                  cuda_type(gdt), int(k), b_ptr, cuda_type(gdt), int(k), &beta, c_ptr, ctype, int(n),
                                  compute, cublas::kGemmDefault),
                      "cublasGemmEx");
    }

    if (acc_scratch || (f32_out && bias)) {  // round once (and add the bias) into out
        const float *acc = static_cast<const float *>(c_ptr);
        dispatch_float(act, [&](auto otag) {
            using TO = decltype(otag);
            dispatch_float(wdt, [&](auto btag) {
                using TB = decltype(btag);
                bias_kernel<TO, TB><<<grid_for(m * n, kThreads), kThreads, 0, stream>>>(
                    reinterpret_cast<TO *>(out), acc, reinterpret_cast<const TB *>(bias), m, n);
            });
        });
        LLAISYS_CUDA_CHECK(cudaGetLastError());
    }
}

}  // namespace llaisys::ops::nvidia

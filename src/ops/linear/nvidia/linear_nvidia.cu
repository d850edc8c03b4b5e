// cuBLAS is column-major. Row-major out [m, n] is column-major out^T [n, m] (ld n), weight
// [n, k] is column-major W^T [k, n] (ld k), in [m, k] is in^T [k, m] (ld k), so
//   out^T = op_T(W^T) x in^T  ->  GemmEx(T, N, M = n, N = m, K = k, A = weight, B = in, C = out).
#include "linear_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "gemm_common.hpp"
#include "gemv16_nvidia.hpp"

#include <climits>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;

// out [m, n] = round(acc [m, n] + bias [n]); acc may be out itself (f32), bias may be null.
template <class TO, class TB>
__global__ void bias_kernel(TO *out, const float *acc, const TB *bias, size_t m, size_t n) {
    const size_t total = m * n;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
        out[i] = from_float<TO>(acc[i] + (bias ? to_float(bias[i % n]) : 0.0f));
    }
}

constexpr unsigned kThreads = 256;

cudaDataType_t cuda_type(llaisysDataType_t dt) {
    switch (dt) {
    case LLAISYS_DTYPE_F32: return CUDA_R_32F;
    case LLAISYS_DTYPE_F16: return CUDA_R_16F;
    case LLAISYS_DTYPE_BF16: return CUDA_R_16BF;
    default: fail(LLAISYS_STATUS_UNSUPPORTED, "linear: dtype ", dtype_name(dt), " is not supported on NVIDIA");
    }
}

}  // namespace

void linear(std::byte *out, const std::byte *in, llaisysDataType_t act, const std::byte *weight,
            const std::byte *bias, llaisysDataType_t wdt, size_t m, size_t n, size_t k,
            int device_id, cudaStream_t stream) {
    if (m == 0 || n == 0) return;
    if (gemv16_serves(act, wdt, m, k, in, weight)) {  // decode: f32 activations over 16-bit weights
        gemv16(reinterpret_cast<float *>(out), reinterpret_cast<const float *>(in), weight, bias, wdt, m, n, k, stream);
        return;
    }
    LLAISYS_CHECK(m <= size_t(INT_MAX) && n <= size_t(INT_MAX) && k <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED,
                  "linear: [", m, ", ", k, "] x [", n, ", ", k, "]^T exceeds cuBLAS's 32-bit sizes");
    DeviceState &st = device_state(device_id);
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

// Linear over GGUF blocks on the GPU (quant_linear_nvidia.hpp): a dequantize-in-register GEMV
// for decode, dequantized 16-bit panels through cuBLAS for prefill. In cuBLAS's column-major
// terms a panel P [rows_p, k] (row-major) is P^T [k, rows_p] (ld k), so its output columns
//   out^T[row0 .. row0 + rows_p, :] = op_T(P^T) x in^T  ->  GemmEx(T, N, rows_p, m, k, ldc = n)
// with C = out + row0 (see linear_nvidia.cu).
#include "quant_linear_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../../../quant/dequant.hpp"
#include "../../../quant/nvidia/dequant_block.cuh"
#include "../../../quant/nvidia/dequant_nvidia.hpp"
#include "gemm_common.hpp"

#include <algorithm>
#include <climits>
#include <vector>

namespace llaisys::ops::nvidia {
namespace {

using namespace llaisys::device::nvidia;
using quant::nvidia::dequant8;

constexpr unsigned kThreads = 256;        // elementwise kernels
constexpr size_t kPanelBytes = 64 << 20;  // prefill: dequantized weight panel in scratch

// ---------------------------------------------------------------------------------------
// kernels

__device__ __forceinline__ float bias_at(const void *bias, int dt, size_t j) {
    switch (dt) {
    case LLAISYS_DTYPE_F16: return to_float(static_cast<const fp16_t *>(bias)[j]);
    case LLAISYS_DTYPE_BF16: return to_float(static_cast<const bf16_t *>(bias)[j]);
    default: return static_cast<const float *>(bias)[j];
    }
}

// out[i, row] (i < m <= MR) = sum_k x[i, k] * W[row, k] (+ bias[row]): one block per weight
// row. The row's bytes are staged chunk by chunk (whole blocks, at most kChunkBytes) into
// shared memory with 16-byte loads, every one independent of the others, so a block has its
// whole chunk in flight at once; then each thread takes groups of eight elements (t, t +
// kGemvThreads, ...), dequantizes each once from shared memory (dequant8: bit for bit as
// llaisysDequantize) and FMAs it into the f32 sums of all m activation rows; a block
// reduction ends the row. (The first version walked a row with one warp, a group per lane:
// a round trip to memory per 256 elements, one after the other, which left a long row's
// warp waiting on memory for most of its time.) w [rows, nb] blocks, out [m, ldo] and bias
// start at this segment's first row; x [m, k] f32.
constexpr unsigned kGemvThreads = 128;
constexpr size_t kChunkBytes = 8192;

template <class B>
constexpr size_t kChunkBlocks = kChunkBytes / sizeof(B);

// Copies bytes [p0, p1) to `buf` + (p0 % 16): 16-byte loads for the aligned middle, single
// bytes for the ends (which may belong to no allocation past the row's own bytes).
__device__ __forceinline__ void stage_bytes(uint4 *buf, const uint8_t *p0, const uint8_t *p1) {
    const uintptr_t a0 = reinterpret_cast<uintptr_t>(p0), a1 = reinterpret_cast<uintptr_t>(p1);
    const uintptr_t base = a0 & ~uintptr_t(15), lo = (a0 + 15) & ~uintptr_t(15), hi = a1 & ~uintptr_t(15);
    uint8_t *sb = reinterpret_cast<uint8_t *>(buf);
    const uintptr_t head_end = lo < a1 ? lo : a1;
    for (uintptr_t a = a0 + threadIdx.x; a < head_end; a += blockDim.x) sb[a - base] = *reinterpret_cast<const uint8_t *>(a);
    if (hi > lo) {
        const uint4 *src = reinterpret_cast<const uint4 *>(lo);
        uint4 *dst = buf + (lo - base) / 16;
        const size_t words = (hi - lo) / 16;
        for (size_t v = threadIdx.x; v < words; v += blockDim.x) dst[v] = src[v];
    }
    for (uintptr_t a = (hi > lo ? hi : lo) + threadIdx.x; a < a1; a += blockDim.x) {
        sb[a - base] = *reinterpret_cast<const uint8_t *>(a);
    }
}

template <class B, int MR>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_kernel(float *out, size_t ldo, const float *x, size_t k, int m, const B *w, size_t nb, const void *bias,
                int bias_dt) {
    constexpr int kGroups = quant::nvidia::kGroupsPerBlock<B>;
    constexpr unsigned kWarps = kGemvThreads / 32;
    __shared__ uint4 buf[kChunkBytes / 16 + 2];
    __shared__ float red[MR][kWarps];
    const size_t row = blockIdx.x;
    const B *wr = w + row * nb;
    float acc[MR];
#pragma unroll
    for (int i = 0; i < MR; i++) acc[i] = 0.0f;
    for (size_t b0 = 0; b0 < nb; b0 += kChunkBlocks<B>) {
        const size_t cb = min(kChunkBlocks<B>, nb - b0);
        const uint8_t *p0 = reinterpret_cast<const uint8_t *>(wr + b0);
        if (b0 > 0) __syncthreads();  // every thread is done with the last chunk
        stage_bytes(buf, p0, p0 + cb * sizeof(B));
        __syncthreads();
        const B *sblk = reinterpret_cast<const B *>(reinterpret_cast<const uint8_t *>(buf) +
                                                    (reinterpret_cast<uintptr_t>(p0) & 15));
        for (size_t g = threadIdx.x; g < cb * kGroups; g += kGemvThreads) {
            float v[8];
            dequant8(sblk[g / kGroups], int(g % kGroups) * 8, v);
            const float *xg = x + (b0 * kGroups + g) * 8;
#pragma unroll
            for (int i = 0; i < MR; i++) {
                if (i < m) {
                    const float *xi = xg + size_t(i) * k;
                    float s = acc[i];
#pragma unroll
                    for (int t = 0; t < 8; t++) s = fmaf(v[t], xi[t], s);
                    acc[i] = s;
                }
            }
        }
    }
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < MR; i++) {
        const float s = warp_sum(acc[i]);
        if (lane == 0) red[i][warp] = s;
    }
    __syncthreads();
    if (int(threadIdx.x) < m) {
        const int i = int(threadIdx.x);
        float s = 0.0f;
#pragma unroll
        for (unsigned j = 0; j < kWarps; j++) s += red[i][j];
        out[size_t(i) * ldo + row] = s + (bias ? bias_at(bias, bias_dt, row) : 0.0f);
    }
}

// out [m, n] = round(acc [m, n] + bias [n]); acc may be out itself (f32), bias may be null.
template <class TO>
__global__ void bias_kernel(TO *out, const float *acc, const void *bias, int bias_dt, size_t m, size_t n) {
    const size_t total = m * n;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
        out[i] = from_float<TO>(acc[i] + (bias ? bias_at(bias, bias_dt, i % n) : 0.0f));
    }
}

// ---------------------------------------------------------------------------------------
// launch helpers

void add_bias(std::byte *out, llaisysDataType_t act, const float *acc, const std::byte *bias,
              llaisysDataType_t bias_dt, size_t m, size_t n, cudaStream_t stream) {
    dispatch_float(act, [&](auto otag) {
        using TO = decltype(otag);
        bias_kernel<TO><<<grid_for(m * n, kThreads), kThreads, 0, stream>>>(reinterpret_cast<TO *>(out), acc, bias,
                                                                          int(bias_dt), m, n);
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

template <class B, int MR>
void launch_gemv(float *out, size_t ldo, const float *x, size_t k, int m, const B *w, size_t rows, size_t nb,
                 const void *bias, llaisysDataType_t bias_dt, cudaStream_t stream) {
    LLAISYS_CHECK(rows <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED, "quantized linear: ", rows,
                  " weight rows exceed the CUDA grid");
    gemv_kernel<B, MR><<<unsigned(rows), kGemvThreads, 0, stream>>>(out, ldo, x, k, m, w, nb, bias, int(bias_dt));
}

// The GEMV over every segment, activation rows in chunks of at most kQuantGemvRows.
// out [m, n] f32, x [m, k] f32.
void gemv(float *out, const float *x, const cpu::QuantRows *segs, size_t n_segs, size_t n, size_t k,
          const std::byte *bias, llaisysDataType_t bias_dt, size_t m, cudaStream_t stream) {
    for (size_t i0 = 0; i0 < m; i0 += kQuantGemvRows) {
        const int mc = int(std::min(kQuantGemvRows, m - i0));
        for (size_t s = 0; s < n_segs; s++) {
            const cpu::QuantRows &seg = segs[s];
            if (seg.rows == 0) continue;
            const size_t nb = k / quant_block_size(seg.dt);
            float *o = out + i0 * n + seg.row0;
            const float *xc = x + i0 * k;
            const void *b = bias ? bias + seg.row0 * dtype_size(bias_dt) : nullptr;
            quant::dispatch_quant(seg.dt, [&](auto tag) {
                using B = decltype(tag);
                const B *w = reinterpret_cast<const B *>(seg.data);
                if (mc <= 1) launch_gemv<B, 1>(o, n, xc, k, mc, w, seg.rows, nb, b, bias_dt, stream);
                else if (mc <= 2) launch_gemv<B, 2>(o, n, xc, k, mc, w, seg.rows, nb, b, bias_dt, stream);
                else if (mc <= 4) launch_gemv<B, 4>(o, n, xc, k, mc, w, seg.rows, nb, b, bias_dt, stream);
                else launch_gemv<B, 8>(o, n, xc, k, mc, w, seg.rows, nb, b, bias_dt, stream);
            });
            LLAISYS_CUDA_CHECK(cudaGetLastError());
        }
    }
}

cudaDataType_t cuda_type(llaisysDataType_t dt) { return dt == LLAISYS_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF; }

void check_segments(const cpu::QuantRows *segs, size_t n_segs, size_t n, size_t k) {
    size_t next = 0;
    for (size_t s = 0; s < n_segs; s++) {
        const cpu::QuantRows &seg = segs[s];
        LLAISYS_CHECK(seg.row0 == next, LLAISYS_STATUS_SHAPE_MISMATCH, "quantized linear: segment ", s,
                      " starts at row ", seg.row0, ", expected ", next, " (segments must tile the rows in order)");
        LLAISYS_CHECK(quant::row_bytes(seg.dt, k) == seg.row_bytes, LLAISYS_STATUS_SHAPE_MISMATCH,
                      "quantized linear: segment ", s, " has ", seg.row_bytes, "-byte rows, but k = ", k, " of ",
                      dtype_name(seg.dt), " needs ", quant::row_bytes(seg.dt, k));
        LLAISYS_CHECK(seg.rows == 0 || seg.data != nullptr, LLAISYS_STATUS_INVALID_ARGUMENT,
                      "quantized linear: segment ", s, " has no data");
        next += seg.rows;
    }
    LLAISYS_CHECK(next == n, LLAISYS_STATUS_SHAPE_MISMATCH, "quantized linear: the segments cover ", next,
                  " rows of a weight with n = ", n);
}

}  // namespace

void linear_quant(std::byte *out, const std::byte *in, llaisysDataType_t act, const cpu::QuantRows *segs,
                  size_t n_segs, size_t n, size_t k, const std::byte *bias, llaisysDataType_t bias_dt, size_t m,
                  int device_id, cudaStream_t stream) {
    check_segments(segs, n_segs, n, k);
    if (m == 0 || n == 0) return;
    dispatch_float(act, [](auto) {});  // validates act
    if (bias) dispatch_float(bias_dt, [](auto) {});
    DeviceState &st = device_state(device_id);
    const bool f32 = act == LLAISYS_DTYPE_F32;

    if (m <= kQuantGemvRows || k == 0) {
        // f32 activations and out in place; 16-bit ones widened, the product in f32 scratch
        const size_t x_bytes = f32 ? 0 : align_up(m * k * sizeof(float));
        const size_t acc_bytes = f32 ? 0 : align_up(m * n * sizeof(float));
        std::byte *buf = f32 ? nullptr : scratch(st, device_id, x_bytes + acc_bytes);
        const float *x = reinterpret_cast<const float *>(in);
        float *acc = reinterpret_cast<float *>(out);
        if (!f32) {
            convert_dtype(buf, LLAISYS_DTYPE_F32, in, act, m * k, stream);
            x = reinterpret_cast<const float *>(buf);
            acc = reinterpret_cast<float *>(buf + x_bytes);
        }
        gemv(acc, x, segs, n_segs, n, k, f32 ? bias : nullptr, bias_dt, m, stream);
        if (!f32) add_bias(out, act, acc, bias, bias_dt, m, n, stream);
        return;
    }

    LLAISYS_CHECK(m <= size_t(INT_MAX) && n <= size_t(INT_MAX) && k <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED,
                  "linear: [", m, ", ", k, "] x [", n, ", ", k, "]^T exceeds cuBLAS's 32-bit sizes");
    const llaisysDataType_t gdt = act == LLAISYS_DTYPE_F16 ? LLAISYS_DTYPE_F16 : LLAISYS_DTYPE_BF16;
    const size_t panel_rows = std::min(n, std::max<size_t>(1, kPanelBytes / (k * 2)));
    const size_t in_bytes = act == gdt ? 0 : align_up(m * k * 2);        // [m, k] gdt
    const size_t acc_bytes = f32 ? 0 : align_up(m * n * sizeof(float));  // [m, n] f32
    const size_t panel_bytes = align_up(panel_rows * k * 2);             // [panel_rows, k] gdt
    std::byte *buf = scratch(st, device_id, in_bytes + acc_bytes + panel_bytes);
    const void *b_ptr = in;
    if (act != gdt) {
        convert_dtype(buf, gdt, in, act, m * k, stream);
        b_ptr = buf;
    }
    float *acc = f32 ? reinterpret_cast<float *>(out) : reinterpret_cast<float *>(buf + in_bytes);
    std::byte *panel = buf + in_bytes + acc_bytes;

    const cublas::Api &api = cublas::api();
    const cublas::Handle h = st.handle;
    cublas::check(api.set_stream(h, stream), "cublasSetStream");
    const float alpha = 1.0f, beta = 0.0f;
    for (size_t s = 0; s < n_segs; s++) {
        const cpu::QuantRows &seg = segs[s];
        for (size_t r = 0; r < seg.rows; r += panel_rows) {
            const size_t rows_p = std::min(panel_rows, seg.rows - r);
            quant::nvidia::dequantize_rows(panel, gdt, seg.data, seg.dt, rows_p, k, nullptr, r, stream);
            cublas::check(api.gemm_ex(h, cublas::kOpT, cublas::kOpN, int(rows_p), int(m), int(k), &alpha, panel,
                                      cuda_type(gdt), int(k), b_ptr, cuda_type(gdt), int(k), &beta,
                                      acc + seg.row0 + r, CUDA_R_32F, int(n), cublas::kCompute32F,
                                      cublas::kGemmDefault),
                          "cublasGemmEx");
        }
    }
    if (bias || !f32) add_bias(out, act, acc, bias, bias_dt, m, n, stream);
}

}  // namespace llaisys::ops::nvidia

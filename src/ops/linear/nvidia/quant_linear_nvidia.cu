// Linear over GGUF blocks on the GPU (quant_linear_nvidia.hpp): a dequantize-in-register GEMV
// for decode, dequantized 16-bit panels through cuBLAS for prefill. In cuBLAS's column-major
// terms a panel P [rows_p, k] (row-major) is P^T [k, rows_p] (ld k), so its output columns
//   out^T[row0 .. row0 + rows_p, :] = op_T(P^T) x in^T  ->  GemmEx(T, N, rows_p, m, k, ldc = n)
// with C = out + row0 (see linear_nvidia.cu).
#include "quant_linear_nvidia.hpp"

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../../../quant/blocks.hpp"
#include "../../../quant/dequant.hpp"
#include "../../../quant/nvidia/dequant_nvidia.hpp"
#include "gemm_common.hpp"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <type_traits>
#include <vector>

#include "quant_gemv_float.cuh"  // the kernels, by section (they bring the block types into this
#include "quant_gemv_int8.cuh"   // file's anonymous namespace)

namespace llaisys::ops::nvidia {
namespace {

constexpr unsigned kThreads = 256;        // elementwise kernels
constexpr size_t kPanelBytes = 64 << 20;  // prefill: dequantized weight panel in scratch

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

// The activations quantized for the int8 kernels: q [m, k] int8, d [m, k / 32] f32; q null
// where none of the call's formats has an int8 kernel (or LLAISYS_GEMV_INT8=0).
struct QuantX {
    const int8_t *q = nullptr;
    const float *d = nullptr;
    bool pdl = false;         // the pipelined GEMV launches as a programmatic dependent (pdl_enabled)
    bool accumulate = false;  // out += the product (linear_quant_int8); the int8 kernels only
};

bool int8_format(llaisysDataType_t dt) {
    return dt == LLAISYS_DTYPE_Q8_0 || dt == LLAISYS_DTYPE_Q4_K || dt == LLAISYS_DTYPE_Q6_K;
}

// Whether a segment's blocks sit where the int8 kernels' loads need them: 16-byte aligned for
// Q4_K, 2-byte for the others.
bool int8_aligned(const cpu::QuantRows &seg) {
    return reinterpret_cast<uintptr_t>(seg.data) % (seg.dt == LLAISYS_DTYPE_Q4_K ? 16 : 2) == 0;
}

// The decode kernel of the int8 formats, LLAISYS_GEMV_INT8 read once: 0 the float path, 2 the
// pipelined kernel (gemv_int8_pipe_kernel), anything else or unset the first int8 kernel
// (gemv_int8_kernel), the one checked on a GPU; the pipelined one becomes the default once a GPU
// run has passed its tests and timed it (tools/gpu/call.sh).
enum class Int8Kernel { kNone, kFirst, kPipelined };
Int8Kernel int8_kernel() {
    static const Int8Kernel kernel = [] {
        const char *e = std::getenv("LLAISYS_GEMV_INT8");
        return e && e[0] == '0' ? Int8Kernel::kNone : e && e[0] == '2' ? Int8Kernel::kPipelined : Int8Kernel::kFirst;
    }();
    return kernel;
}

// A device attribute, read once per device (any thread may race to fill the cache).
template <cudaDeviceAttr A>
int device_attr(int device_id) {
    static std::atomic<int> cache[64];
    int v = device_id >= 0 && device_id < 64 ? cache[device_id].load(std::memory_order_relaxed) : 0;
    if (v == 0) {
        LLAISYS_CUDA_CHECK(cudaDeviceGetAttribute(&v, A, device_id));
        if (device_id >= 0 && device_id < 64) cache[device_id].store(v, std::memory_order_relaxed);
    }
    return v;
}

// Warps a row takes: 4 while one warp a row would not fill the GPU once (and every warp
// gets a block of the row), else 1. LLAISYS_GEMV_SPLIT=1|2|4 fixes it (for measurements).
int warps_per_row(size_t rows, size_t nb, int device_id) {
    static const int forced = [] {
        const char *e = std::getenv("LLAISYS_GEMV_SPLIT");
        const int v = e ? std::atoi(e) : 0;
        return v == 1 || v == 2 || v == 4 ? v : 0;
    }();
    const int sm = device_attr<cudaDevAttrMultiProcessorCount>(device_id);
    int wpr = forced ? forced : rows < size_t(sm) * 32 ? 4 : 1;
    while (wpr > 1 && nb < size_t(wpr)) wpr /= 2;
    return wpr;
}

// Whether the pipelined int8 GEMV launches as a programmatic dependent of the kernel before it
// (sm_90 and later; LLAISYS_GEMV_PDL=0 launches it as any kernel, for A/B): its blocks start,
// and issue their first weight loads, while the activation quantizer still runs, instead of a
// launch latency after it; the kernel waits for the quantizer before reading the activations.
bool pdl_enabled(int device_id) {
    static const bool off = [] {
        const char *e = std::getenv("LLAISYS_GEMV_PDL");
        return e && e[0] == '0';
    }();
    return !off && int8_kernel() == Int8Kernel::kPipelined &&
           device_attr<cudaDevAttrComputeCapabilityMajor>(device_id) >= 9;
}

template <class B, int MR, int WPR>
void launch_gemv(float *out, size_t ldo, const float *x, size_t k, int m, const SegGroup<B> &g, size_t nb,
                 const void *bias, llaisysDataType_t bias_dt, cudaStream_t stream) {
    const bool x_vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && k % 4 == 0;  // float4 activation loads
    const size_t rows = g.rows;
    gemv_kernel<B, MR, WPR><<<unsigned(ceil_div(rows, kGemvWarps / WPR)), kGemvThreads, 0, stream>>>(
        out, ldo, x, k, m, g, nb, bias, int(bias_dt), x_vec);
}

template <class B, int MR, int WPR>
void launch_gemv_int8(float *out, size_t ldo, const QuantX &qx, size_t k, int m, const SegGroup<B> &g, size_t nb,
                      const void *bias, llaisysDataType_t bias_dt, cudaStream_t stream) {
    if (int8_kernel() == Int8Kernel::kFirst) {
        gemv_int8_kernel<B, MR, WPR><<<unsigned(ceil_div(size_t(g.rows), kGemvWarps / WPR)), kGemvThreads, 0, stream>>>(
            out, ldo, qx.q, qx.d, k, m, g, nb, bias, int(bias_dt), qx.accumulate);
        return;
    }
    cudaLaunchAttribute pdl{};
    pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    pdl.val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(ceil_div(size_t(g.rows), kPipeBlockRows<B, MR, WPR>)));
    cfg.blockDim = dim3(kGemvThreads);
    cfg.stream = stream;
    cfg.attrs = &pdl;
    cfg.numAttrs = qx.pdl ? 1 : 0;
    LLAISYS_CUDA_CHECK(cudaLaunchKernelEx(&cfg, gemv_int8_pipe_kernel<B, MR, WPR>, out, ldo, qx.q, qx.d, k, m, g, nb,
                                          bias, int(bias_dt), qx.accumulate));
}

// The int8 kernel where the format has one and the activations were quantized (qx.q set),
// else the float one.
template <class B, int MR>
void launch_gemv(float *out, size_t ldo, const float *x, const QuantX &qx, size_t k, int m, const SegGroup<B> &g,
                 size_t nb, const void *bias, llaisysDataType_t bias_dt, int wpr, cudaStream_t stream) {
    if constexpr (kQUnits<B> > 0) {
        if (qx.q) {
            if (wpr == 4) launch_gemv_int8<B, MR, 4>(out, ldo, qx, k, m, g, nb, bias, bias_dt, stream);
            else if (wpr == 2) launch_gemv_int8<B, MR, 2>(out, ldo, qx, k, m, g, nb, bias, bias_dt, stream);
            else launch_gemv_int8<B, MR, 1>(out, ldo, qx, k, m, g, nb, bias, bias_dt, stream);
            return;
        }
    }
    LLAISYS_CHECK(!qx.accumulate && x, LLAISYS_STATUS_INTERNAL,
                  "quantized linear: the float GEMV has no f32 activations or cannot accumulate");
    if (wpr == 4) launch_gemv<B, MR, 4>(out, ldo, x, k, m, g, nb, bias, bias_dt, stream);
    else if (wpr == 2) launch_gemv<B, MR, 2>(out, ldo, x, k, m, g, nb, bias, bias_dt, stream);
    else launch_gemv<B, MR, 1>(out, ldo, x, k, m, g, nb, bias, bias_dt, stream);
}

// The GEMV over every segment, activation rows in chunks of at most kQuantGemvRows: one
// launch for each run of consecutive segments of one format (at most kMaxGroupSegs).
// out [m, n] f32, x [m, k] f32.
void gemv(float *out, const float *x, QuantX qx, const cpu::QuantRows *segs, size_t n_segs, size_t n, size_t k,
          const std::byte *bias, llaisysDataType_t bias_dt, size_t m, int device_id, cudaStream_t stream) {
    for (size_t s0 = 0; s0 < n_segs;) {
        size_t s1 = s0 + 1;  // the group: segments [s0, s1)
        while (s1 < n_segs && s1 - s0 < size_t(kMaxGroupSegs) && segs[s1].dt == segs[s0].dt) s1++;
        const size_t row0 = segs[s0].row0, rows = segs[s1 - 1].row0 + segs[s1 - 1].rows - row0;
        const size_t nb = k / quant_block_size(segs[s0].dt);
        if (rows > 0) {
            const int wpr = warps_per_row(rows, nb, device_id);
            quant::dispatch_quant(segs[s0].dt, [&](auto tag) {
                using B = decltype(tag);
                SegGroup<B> g{};
                g.n = int(s1 - s0);
                for (size_t s = s0; s < s1; s++) {
                    g.w[s - s0] = reinterpret_cast<const B *>(segs[s].data);
                    g.row0[s - s0] = unsigned(segs[s].row0 - row0);
                }
                g.rows = unsigned(rows);
                QuantX gx = qx;
                for (size_t s = s0; s < s1; s++) {
                    if (!int8_aligned(segs[s])) gx = QuantX{};
                }
                for (size_t i0 = 0; i0 < m; i0 += kQuantGemvRows) {
                    const int mc = int(std::min(kQuantGemvRows, m - i0));
                    float *o = out + i0 * n + row0;
                    const float *xc = x ? x + i0 * k : nullptr;
                    const QuantX xi = gx.q ? QuantX{gx.q + i0 * k, gx.d + i0 * k / kXBlock, gx.pdl, gx.accumulate}
                                           : QuantX{};
                    const void *b = bias ? bias + row0 * dtype_size(bias_dt) : nullptr;
                    if (mc <= 1) launch_gemv<B, 1>(o, n, xc, xi, k, mc, g, nb, b, bias_dt, wpr, stream);
                    else if (mc <= 2) launch_gemv<B, 2>(o, n, xc, xi, k, mc, g, nb, b, bias_dt, wpr, stream);
                    else if (mc <= 4) launch_gemv<B, 4>(o, n, xc, xi, k, mc, g, nb, b, bias_dt, wpr, stream);
                    else launch_gemv<B, 8>(o, n, xc, xi, k, mc, g, nb, b, bias_dt, wpr, stream);
                    LLAISYS_CUDA_CHECK(cudaGetLastError());
                }
            });
        }
        s0 = s1;
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
    LLAISYS_CHECK(m <= size_t(INT_MAX) && n <= size_t(INT_MAX) && k <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED,
                  "linear: [", m, ", ", k, "] x [", n, ", ", k, "]^T exceeds the kernels' 32-bit sizes");
    DeviceState &st = device_state(device_id);
    const bool f32 = act == LLAISYS_DTYPE_F32;

    if (m <= kQuantGemvRows || k == 0) {
        // f32 activations and out in place; 16-bit ones widened, the product in f32 scratch
        bool int8 = false;  // activations quantized once for the int8 kernels
        for (size_t s = 0; s < n_segs; s++) int8 = int8 || (segs[s].rows > 0 && int8_format(segs[s].dt));
        int8 = int8 && int8_kernel() != Int8Kernel::kNone && k > 0 && k % kXBlock == 0;
        const size_t x_bytes = f32 ? 0 : align_up(m * k * sizeof(float));
        const size_t acc_bytes = f32 ? 0 : align_up(m * n * sizeof(float));
        const size_t q_bytes = int8 ? align_up(m * k) : 0, d_bytes = int8 ? align_up(m * k / kXBlock * 4) : 0;
        const size_t total = x_bytes + acc_bytes + q_bytes + d_bytes;
        std::byte *buf = total ? scratch(st, device_id, total) : nullptr;
        const float *x = reinterpret_cast<const float *>(in);
        float *acc = reinterpret_cast<float *>(out);
        if (!f32) {
            convert_dtype(buf, LLAISYS_DTYPE_F32, in, act, m * k, stream);
            x = reinterpret_cast<const float *>(buf);
            acc = reinterpret_cast<float *>(buf + x_bytes);
        }
        QuantX qx;
        if (int8) {
            int8_t *q = reinterpret_cast<int8_t *>(buf + x_bytes + acc_bytes);
            float *d = reinterpret_cast<float *>(buf + x_bytes + acc_bytes + q_bytes);
            quantize_act(q, d, x, m, k, stream);
            qx = QuantX{q, d, pdl_enabled(device_id)};
        }
        gemv(acc, x, qx, segs, n_segs, n, k, f32 ? bias : nullptr, bias_dt, m, device_id, stream);
        if (!f32) add_bias(out, act, acc, bias, bias_dt, m, n, stream);
        return;
    }

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


bool linear_quant_takes_int8(const cpu::QuantRows *segs, size_t n_segs, size_t k, size_t m) {
    if (m == 0 || m > kQuantGemvRows || k == 0 || k % kXBlock != 0 || int8_kernel() == Int8Kernel::kNone) return false;
    bool any = false;
    for (size_t s = 0; s < n_segs; s++) {
        if (segs[s].rows == 0) continue;
        if (!int8_format(segs[s].dt) || !segs[s].data || !int8_aligned(segs[s])) return false;
        any = true;
    }
    return any;
}

void quantize_act(int8_t *q, float *d, const float *x, size_t m, size_t k, cudaStream_t stream) {
    LLAISYS_CHECK_ARG(k % kXBlock == 0, "quantize_act: k = ", k, " is not a multiple of ", kXBlock);
    const size_t blocks = m * k / kXBlock;
    if (blocks == 0) return;
    quantize_x_kernel<<<unsigned(ceil_div(blocks * 32, kThreads)), kThreads, 0, stream>>>(q, d, x, blocks);
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

void linear_quant_int8(float *out, const int8_t *q, const float *d, const cpu::QuantRows *segs, size_t n_segs,
                       size_t n, size_t k, const std::byte *bias, llaisysDataType_t bias_dt, size_t m,
                       bool accumulate, int device_id, cudaStream_t stream) {
    check_segments(segs, n_segs, n, k);
    LLAISYS_CHECK_ARG(linear_quant_takes_int8(segs, n_segs, k, m), "linear_quant_int8: a [", m, ", ", k,
                      "] product that the int8 GEMV does not serve (linear_quant_takes_int8)");
    if (bias) dispatch_float(bias_dt, [](auto) {});
    gemv(out, nullptr, QuantX{q, d, pdl_enabled(device_id), accumulate}, segs, n_segs, n, k, bias, bias_dt, m,
         device_id, stream);
}

}  // namespace llaisys::ops::nvidia

// The int8 GEMVs of quant_linear_nvidia.cu (__dp4a over quantized activations: the first kernel
// and the pipelined one) and the bias kernel; included there only, after quant_gemv_float.cuh
// (everything in an anonymous namespace).
#pragma once

#include "../../../device/nvidia/load_stream.cuh"
#include "int8_act.cuh"
#include "int8_layout.hpp"
#include "quant_gemv_float.cuh"

namespace llaisys::ops::nvidia {
namespace {

// ---------------------------------------------------------------------------------------
// The int8 GEMV (Q8_0, Q4_K, Q6_K): llama.cpp's route. The activations are quantized once a
// call to int8 blocks of 32 (scale amax / 127, round to nearest even), and each lane multiplies
// a unit of weight bytes, read from global memory where they are (no staging), with __dp4a:
// four multiply-adds an instruction on the integers, one scale a unit. About a quarter of the
// float path's instructions an element, and every lane's loads are in flight at once. The
// error is the CPU int8 path's: within 0.5 d_x |W| per activation block, d_x <= amax / 127.

// kXBlock, pdl_launch_dependents and the quantizer's arithmetic are in int8_act.cuh. A
// programmatic dependent GEMV waits here for its producer's grid before it reads activations.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// xq [m, k] int8, xd [m, k / 32] f32: one warp a block of 32, one element a lane. A block
// holding a NaN or an infinity gets a NaN scale, so its products are NaN, as the float path's.
__global__ void quantize_x_kernel(int8_t *xq, float *xd, const float *x, size_t blocks) {
    pdl_launch_dependents();
    const size_t b = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (b >= blocks) return;  // whole warps
    const unsigned lane = threadIdx.x & 31;
    quantize32(xq + b * kXBlock, xd + b, x[b * kXBlock + lane], lane);
}

template <class B>
constexpr size_t kBlockElems = quant::block_elems<B>();
template <class B>
constexpr int kQUnits = 0;  // int8 units a block (0: the format has no int8 kernel)
template <>
constexpr int kQUnits<BlockQ8_0> = 2;  // 16 elements
template <>
constexpr int kQUnits<BlockQ4_K> = 8;  // 16 elements of sub-block 2p and 16 of 2p + 1
template <>
constexpr int kQUnits<BlockQ6_K> = 16;  // 16 elements, one scale

// Four bytes from two 2-byte aligned halves (Q8_0's and Q6_K's blocks are 34 and 210 bytes).
__device__ __forceinline__ int ld4_2(const uint8_t *p) {
    const uint16_t *h = reinterpret_cast<const uint16_t *>(p);
    return int(uint32_t(h[0]) | uint32_t(h[1]) << 16);
}

__device__ __forceinline__ int dot16(const int (&q)[4], const int4 &xv, int c) {
    c = __dp4a(q[0], xv.x, c);
    c = __dp4a(q[1], xv.y, c);
    c = __dp4a(q[2], xv.z, c);
    return __dp4a(q[3], xv.w, c);
}

// acc[i] += dw d_x (q . xq_i) over the 16 elements from e on: a unit of the formats with one
// scale per unit (Q8_0, Q6_K).
template <int MR>
__device__ __forceinline__ void int8_unit(const int (&q)[4], float dw, size_t e, const int8_t *xq, const float *xd,
                                          size_t k, int m, float *acc) {
#pragma unroll
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            const int4 xv = *reinterpret_cast<const int4 *>(xq + size_t(i) * k + e);
            acc[i] = fmaf(dw * xd[(size_t(i) * k + e) / kXBlock], float(dot16(q, xv, 0)), acc[i]);
        }
    }
}

// acc[i] += unit u of block `blk` (at element e0 of the row) . x_i, for i < m.
template <int MR>
__device__ __forceinline__ void qunit(const BlockQ8_0 &b, int u, size_t e0, const int8_t *xq, const float *xd,
                                      size_t k, int m, float *acc) {
    int q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = ld4_2(reinterpret_cast<const uint8_t *>(b.qs) + 16 * u + 4 * w);
    const float dw = to_float(b.d);
    int8_unit<MR>(q, dw, e0 + kUnit * u, xq, xd, k, m, acc);
}

template <int MR>
__device__ __forceinline__ void qunit(const BlockQ4_K &b, int u, size_t e0, const int8_t *xq, const float *xd,
                                      size_t k, int m, float *acc) {
    const int p = u / 2, h = u % 2;
    const uint4 qv = *reinterpret_cast<const uint4 *>(b.qs + 32 * p + kUnit * h);
    const int qw[4] = {int(qv.x), int(qv.y), int(qv.z), int(qv.w)};
    int lo[4], hi[4];
#pragma unroll
    for (int w = 0; w < 4; w++) lo[w] = qw[w] & 0x0F0F0F0F, hi[w] = (qw[w] >> 4) & 0x0F0F0F0F;
    uint8_t sc0, m0, sc1, m1;
    quant::scale_min_k4(b.scales, 2 * p, sc0, m0);
    quant::scale_min_k4(b.scales, 2 * p + 1, sc1, m1);
    const float d = to_float(b.d), dmin = to_float(b.dmin);
    const float ds0 = d * float(sc0), dm0 = dmin * float(m0), ds1 = d * float(sc1), dm1 = dmin * float(m1);
    const int ones[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
    const size_t e = e0 + 64 * p + kUnit * h;  // sub-block 2p's elements; 2p + 1's are 32 on
#pragma unroll
    for (int i = 0; i < MR; i++) {
        if (i < m) {
            const int8_t *xr = xq + size_t(i) * k + e;
            const int4 x0 = *reinterpret_cast<const int4 *>(xr), x1 = *reinterpret_cast<const int4 *>(xr + 32);
            const float *dx = xd + (size_t(i) * k + e) / kXBlock;
            const float s0 = ds0 * float(dot16(lo, x0, 0)) - dm0 * float(dot16(ones, x0, 0));
            const float s1 = ds1 * float(dot16(hi, x1, 0)) - dm1 * float(dot16(ones, x1, 0));
            acc[i] = fmaf(dx[0], s0, fmaf(dx[1], s1, acc[i]));
        }
    }
}

template <int MR>
__device__ __forceinline__ void qunit(const BlockQ6_K &b, int u, size_t e0, const int8_t *xq, const float *xd,
                                      size_t k, int m, float *acc) {
    uint32_t v[4];  // the float path's unit values, read through 2-byte loads
    q6k_unit(b, u, [](const uint8_t *p) { return uint32_t(ld4_2(p)); }, v);
    int q[4];
#pragma unroll
    for (int w = 0; w < 4; w++) q[w] = int(__vsub4(v[w], 0x20202020u));  // q - 32 in each byte: -32 .. 31
    const float dw = to_float(b.d) * float(b.scales[u]);
    int8_unit<MR>(q, dw, e0 + kUnit * u, xq, xd, k, m, acc);
}

// The int8 twin of gemv_kernel (same rows, warps and split-K; lanes take units in turn): the
// first int8 kernel, the default (checked on an H200) until the pipelined one has run on a GPU.
template <class B, int MR, int WPR>
__global__ void __launch_bounds__(kGemvThreads)
    gemv_int8_kernel(float *out, size_t ldo, const int8_t *xq, const float *xd, size_t k, int m, SegGroup<B> g,
                     size_t nb, const void *bias, int bias_dt, bool accumulate) {
    static_assert(kGemvWarps % WPR == 0, "a block holds whole rows");
    __shared__ float part[WPR > 1 ? kGemvWarps : 1][1][MR];
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = warp % WPR;
    const size_t row = size_t(blockIdx.x) * (kGemvWarps / WPR) + warp / WPR;
    const bool live = row < g.rows;
    if (WPR == 1 && !live) return;
    float acc[1][MR];
#pragma unroll
    for (int i = 0; i < MR; i++) acc[0][i] = 0.0f;
    if (live) {
        const B *wr = group_row(g, row, nb);
        const size_t u_end = nb * (sub + 1) / WPR * kQUnits<B>;
#pragma unroll 2
        for (size_t u = nb * sub / WPR * kQUnits<B> + lane; u < u_end; u += 32) {
            const size_t blk = u / kQUnits<B>;
            qunit<MR>(wr[blk], int(u % kQUnits<B>), blk * kBlockElems<B>, xq, xd, k, m, acc[0]);
        }
    }
    finish_row<MR, WPR>(acc, part, lane, warp, row, g.rows, out, ldo, m, bias, bias_dt, accumulate);
}

// ---------------------------------------------------------------------------------------
// The pipelined int8 GEMV (opt-in: LLAISYS_GEMV_INT8=2 until a GPU run has passed its tests).
// gemv_int8_kernel has each lane take one unit at a time: a 16-byte load of nibbles, byte loads of
// its scales and 2-byte loads of d, then the arithmetic, so a warp keeps few bytes in flight
// (gate|up read at 1.3 TB/s where gemv16 reads bf16 at 3.1, doc/nvidia.md). Here a lane loads
// batches of kInFlight items, all of a batch's 16-byte loads issued together and the next batch's
// issued before this one is summed (a double buffer across loop iterations: ptxas schedules within
// an iteration for registers and sank half of a single batch's loads below the first rows'
// products). A batch is the same item of R rows (WPR = 1: a warp takes R rows) or S items of one
// row (split-K), R S = kInFlight. Weights come through load_stream; a Q4_K block's header is one
// 16-byte load, Q6_K's and Q8_0's 2-byte aligned bytes come from the aligned chunks that cover
// them (int8_layout.hpp, whose byte mapping test/cpp/test_int8_layout.cpp checks on the host). An
// item's activations are loaded once for its R rows. The products are gemv_int8_kernel's unit by
// unit (same scales, same dp4a sums; Q8_0 adds a block's two 16-element sums as integers, exactly,
// before scaling); only the summation order differs.

// Items a batch: 4, or 2 where two batches' registers would cost occupancy (a Q6_K item holds
// 19 words of loads, and many activation rows widen every item's sums).
template <class B, int MR>
constexpr int kInFlight = std::is_same_v<B, BlockQ6_K> || MR >= 4 ? 2 : 4;
template <class B, int MR, int WPR>
constexpr int kPipeRows = WPR == 1 ? kInFlight<B, MR> : 1;  // rows a warp
template <class B, int MR, int WPR>
constexpr unsigned kPipeBlockRows = kGemvWarps / WPR * kPipeRows<B, MR, WPR>;  // rows a block

// The two chunks covering 16 bytes at p (inside the block for every Q6_K item: its ql and qh
// spans end 18 bytes or more before the block does): words w[0..8), p's bytes at p % 16.
__device__ __forceinline__ void load_cover16(const uint8_t *p, uint32_t (&w)[8]) {
    const uint8_t *c = reinterpret_cast<const uint8_t *>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(15));
    const uint4 a = load_stream(c), b = load_stream(c + 16);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
}

__device__ __forceinline__ unsigned offset16(const uint8_t *p) { return unsigned(reinterpret_cast<uintptr_t>(p) & 15); }

// An f16 scale from its bits, without to_float's branch that keeps a NaN's payload (a branch an
// item): the GPU's arithmetic drops payloads, so a NaN scale gives the same NaN product.
__device__ __forceinline__ float f16_bits(uint32_t bits) { return __half2float(__ushort_as_half(uint16_t(bits))); }

__device__ __forceinline__ int4 x16(const int8_t *xq, size_t k, int i, size_t e, int m) {
    return i < m ? __ldg(reinterpret_cast<const int4 *>(xq + size_t(i) * k + e)) : make_int4(0, 0, 0, 0);
}

template <class B>
struct Int8Item;  // per format: Raw (an item's loaded bytes), X<MR> (its activations), load, load_x, dot

template <>
struct Int8Item<BlockQ4_K> {
    static constexpr int kItems = int8::kItemsQ4K;
    struct Raw {
        uint4 h, q;  // the header chunk, the item's nibble chunk
    };
    template <int MR>
    struct X {
        int4 x0[MR], x1[MR];  // the elements of sub-block 2 p (low nibbles) and 2 p + 1
        float2 dx[MR];        // their activation scales
        int s0[MR], s1[MR];   // their sums (the minimum term's dp4a with ones)
    };
    static __device__ __forceinline__ void load(const uint8_t *blk, int it, Raw &r) {
        r.h = load_stream(blk);
        r.q = load_stream(blk + int8::q4k_qs_offset(it));
    }
    template <int MR>
    static __device__ __forceinline__ void load_x(X<MR> &x, const int8_t *xq, const float *xd, size_t k, int m,
                                                  size_t t) {
        const size_t e = t / kItems * 256 + int8::q4k_elem(int(t % kItems));
        const int ones[4] = {0x01010101, 0x01010101, 0x01010101, 0x01010101};
#pragma unroll
        for (int i = 0; i < MR; i++) {
            x.x0[i] = x16(xq, k, i, e, m), x.x1[i] = x16(xq, k, i, e + 32, m);
            x.dx[i] = i < m ? __ldg(reinterpret_cast<const float2 *>(xd + (size_t(i) * k + e) / kXBlock))
                            : make_float2(0.0f, 0.0f);
            x.s0[i] = dot16(ones, x.x0[i], 0), x.s1[i] = dot16(ones, x.x1[i], 0);
        }
    }
    template <int MR>
    static __device__ __forceinline__ void dot(const Raw &r, const uint8_t *, int it, const X<MR> &x, int m,
                                               float (&acc)[MR]) {
        const int qw[4] = {int(r.q.x), int(r.q.y), int(r.q.z), int(r.q.w)};
        int lo[4], hi[4];
#pragma unroll
        for (int w = 0; w < 4; w++) lo[w] = qw[w] & 0x0F0F0F0F, hi[w] = (qw[w] >> 4) & 0x0F0F0F0F;
        int sc[2], mn[2];
        int8::q4k_scale_min(r.h.y, r.h.z, r.h.w, it / 2, sc, mn);
        const float d = f16_bits(r.h.x & 0xFFFFu), dmin = f16_bits(r.h.x >> 16);
        const float ds0 = d * float(sc[0]), dm0 = dmin * float(mn[0]);
        const float ds1 = d * float(sc[1]), dm1 = dmin * float(mn[1]);
#pragma unroll
        for (int i = 0; i < MR; i++) {
            if (i < m) {
                const float s0 = ds0 * float(dot16(lo, x.x0[i], 0)) - dm0 * float(x.s0[i]);
                const float s1 = ds1 * float(dot16(hi, x.x1[i], 0)) - dm1 * float(x.s1[i]);
                acc[i] = fmaf(x.dx[i].x, s0, fmaf(x.dx[i].y, s1, acc[i]));
            }
        }
    }
};

template <>
struct Int8Item<BlockQ6_K> {
    static constexpr int kItems = int8::kItemsQ6K;
    struct Raw {
        uint32_t ql[8], qh[8];  // the chunks covering the item's ql and qh bytes
        int sc0, sc1;           // scales[u0], scales[u1]
        uint32_t d;             // d's bits
    };
    template <int MR>
    struct X {
        int4 x0[MR], x1[MR];  // the elements of units u0 and u1
        float dx0[MR], dx1[MR];
    };
    static __device__ __forceinline__ void load(const uint8_t *blk, int it, Raw &r) {
        load_cover16(blk + int8::q6k_ql_offset(it), r.ql);
        load_cover16(blk + int8::q6k_qh_offset(it), r.qh);
        const int8_t *sc = reinterpret_cast<const int8_t *>(blk + int8::q6k_scale_offset(it));
        r.sc0 = __ldg(sc), r.sc1 = __ldg(sc + 4);
        r.d = __ldg(reinterpret_cast<const unsigned short *>(blk + int8::q6k_d_offset()));
    }
    template <int MR>
    static __device__ __forceinline__ void load_x(X<MR> &x, const int8_t *xq, const float *xd, size_t k, int m,
                                                  size_t t) {
        const size_t e = t / kItems * 256 + 16 * int8::q6k_unit(int(t % kItems));
#pragma unroll
        for (int i = 0; i < MR; i++) {
            x.x0[i] = x16(xq, k, i, e, m), x.x1[i] = x16(xq, k, i, e + 64, m);
            x.dx0[i] = i < m ? __ldg(xd + (size_t(i) * k + e) / kXBlock) : 0.0f;
            x.dx1[i] = i < m ? __ldg(xd + (size_t(i) * k + e + 64) / kXBlock) : 0.0f;
        }
    }
    template <int MR>
    static __device__ __forceinline__ void dot(const Raw &r, const uint8_t *blk, int it, const X<MR> &x, int m,
                                               float (&acc)[MR]) {
        uint32_t ql[4], qh[4], v0[4], v1[4];
        int8::window<4, 3>(r.ql, offset16(blk + int8::q6k_ql_offset(it)), ql);
        int8::window<4, 3>(r.qh, offset16(blk + int8::q6k_qh_offset(it)), qh);
        int8::q6k_values(ql, qh, it, v0, v1);
        int q0[4], q1[4];
#pragma unroll
        for (int w = 0; w < 4; w++) q0[w] = int(__vsub4(v0[w], 0x20202020u)), q1[w] = int(__vsub4(v1[w], 0x20202020u));
        const float d = f16_bits(r.d), dw0 = d * float(r.sc0), dw1 = d * float(r.sc1);
#pragma unroll
        for (int i = 0; i < MR; i++) {
            if (i < m) {
                acc[i] = fmaf(dw0 * x.dx0[i], float(dot16(q0, x.x0[i], 0)), acc[i]);
                acc[i] = fmaf(dw1 * x.dx1[i], float(dot16(q1, x.x1[i], 0)), acc[i]);
            }
        }
    }
};

template <>
struct Int8Item<BlockQ8_0> {
    static constexpr int kItems = int8::kItemsQ80;
    struct Raw {
        uint32_t c[12];  // the three chunks covering the block's 34 bytes
    };
    template <int MR>
    struct X {
        int4 x0[MR], x1[MR];
        float dx[MR];
    };
    static __device__ __forceinline__ void load(const uint8_t *blk, int, Raw &r) {
        const uint8_t *c = reinterpret_cast<const uint8_t *>(reinterpret_cast<uintptr_t>(blk) & ~uintptr_t(15));
#pragma unroll
        for (int j = 0; j < 3; j++) {  // 34 bytes at offset o <= 14 always reach the third chunk
            const uint4 v = load_stream(c + 16 * j);
            r.c[4 * j] = v.x, r.c[4 * j + 1] = v.y, r.c[4 * j + 2] = v.z, r.c[4 * j + 3] = v.w;
        }
    }
    template <int MR>
    static __device__ __forceinline__ void load_x(X<MR> &x, const int8_t *xq, const float *xd, size_t k, int m,
                                                  size_t t) {
        const size_t e = t * 32;
#pragma unroll
        for (int i = 0; i < MR; i++) {
            x.x0[i] = x16(xq, k, i, e, m), x.x1[i] = x16(xq, k, i, e + 16, m);
            x.dx[i] = i < m ? __ldg(xd + (size_t(i) * k + e) / kXBlock) : 0.0f;
        }
    }
    template <int MR>
    static __device__ __forceinline__ void dot(const Raw &r, const uint8_t *blk, int, const X<MR> &x, int m,
                                               float (&acc)[MR]) {
        uint32_t d_bits, q[8];
        int8::q80_fields(r.c, offset16(blk), d_bits, q);
        const int q0[4] = {int(q[0]), int(q[1]), int(q[2]), int(q[3])};
        const int q1[4] = {int(q[4]), int(q[5]), int(q[6]), int(q[7])};
        const float d = f16_bits(d_bits);
#pragma unroll
        for (int i = 0; i < MR; i++) {
            if (i < m) acc[i] = fmaf(d * x.dx[i], float(dot16(q1, x.x1[i], dot16(q0, x.x0[i], 0))), acc[i]);
        }
    }
};

// out [m, rows] as gemv_int8_kernel; a block covers kPipeBlockRows rows, a warp rows
// row0 .. row0 + R - 1 (split-K over WPR warps as there). Lane l takes items l, l + 32, ... of
// its warp's range, the same item of each of its R rows at once. The loads are unguarded (a
// batch is the same straight-line loads in every lane): a row past the last reads row0's bytes,
// an item past the range the range's last item, and their products are not kept. (The bounds'
// explicit 1 block an SM: without it ptxas spilled 8 bytes in three of the MR >= 4 kernels.)
template <class B, int MR, int WPR>
__global__ void __launch_bounds__(kGemvThreads, 1)
    gemv_int8_pipe_kernel(float *out, size_t ldo, const int8_t *xq, const float *xd, size_t k, int m, SegGroup<B> g,
                          size_t nb, const void *bias, int bias_dt, bool accumulate) {
    using It = Int8Item<B>;
    constexpr int R = kPipeRows<B, MR, WPR>, S = kInFlight<B, MR> / R, NI = It::kItems;
    static_assert(kGemvWarps % WPR == 0, "a block holds whole rows");
    __shared__ float part[WPR > 1 ? kGemvWarps : 1][R][MR];
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = warp % WPR;
    const size_t row0 = (size_t(blockIdx.x) * (kGemvWarps / WPR) + warp / WPR) * R;
    if (WPR == 1 && row0 >= g.rows) return;  // the whole warp; nothing below waits for the block
    float acc[R][MR];
#pragma unroll
    for (int r = 0; r < R; r++) {
#pragma unroll
        for (int i = 0; i < MR; i++) acc[r][i] = 0.0f;
    }
    if (row0 < g.rows) {
        const uint8_t *wr[R];  // the rows' blocks
#pragma unroll
        for (int r = 0; r < R; r++) {
            wr[r] = reinterpret_cast<const uint8_t *>(group_row(g, row0 + r < g.rows ? row0 + r : row0, nb));
        }
        const size_t t_begin = nb * sub / WPR * NI + lane, t_end = nb * (sub + 1) / WPR * NI;
        // raw [S][R]: the next batch's items t, t + 32, ... (S of them) of each row, clamped to
        // the range's last item
        const auto load_batch = [&](typename It::Raw (&raw)[S][R], size_t t0) {
#pragma unroll
            for (int s = 0; s < S; s++) {
                const size_t t = min(t0 + 32 * size_t(s), t_end - 1);
#pragma unroll
                for (int r = 0; r < R; r++) It::load(wr[r] + t / NI * sizeof(B), int(t % NI), raw[s][r]);
            }
        };
        typename It::Raw next[S][R];
        if (t_begin < t_end) load_batch(next, t_begin);
        pdl_wait();  // the activations below are the quantizer's
        for (size_t t0 = t_begin; t0 < t_end; t0 += 32 * S) {
            typename It::Raw raw[S][R];
#pragma unroll
            for (int s = 0; s < S; s++) {
#pragma unroll
                for (int r = 0; r < R; r++) raw[s][r] = next[s][r];
            }
            if (t0 + 32 * S < t_end) load_batch(next, t0 + 32 * S);  // in flight while this batch is summed
#pragma unroll
            for (int s = 0; s < S; s++) {
                const size_t t = t0 + 32 * size_t(s);
                if (t < t_end) {
                    typename It::template X<MR> x;
                    It::template load_x<MR>(x, xq, xd, k, m, t);
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        It::template dot<MR>(raw[s][r], wr[r] + t / NI * sizeof(B), int(t % NI), x, m, acc[r]);
                    }
                }
            }
        }
    }
    finish_row<MR, WPR, R>(acc, part, lane, warp, row0, g.rows, out, ldo, m, bias, bias_dt, accumulate);
}

// out [m, n] = round(acc [m, n] + bias [n]); acc may be out itself (f32), bias may be null.
template <class TO>
__global__ void bias_kernel(TO *out, const float *acc, const void *bias, int bias_dt, size_t m, size_t n) {
    const size_t total = m * n;
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += size_t(gridDim.x) * blockDim.x) {
        out[i] = from_float<TO>(acc[i] + (bias ? bias_at(bias, bias_dt, i % n) : 0.0f));
    }
}

}  // namespace
}  // namespace llaisys::ops::nvidia

// Tensor-core attention for long query rows (prefill), FlashAttention-2's shape: the prefill
// configuration of paged attention when LLAISYS_FLASH_PREFILL=1 (opt-in until it has run on a
// GPU; paged_attention_nvidia.cu). attention_kernel.cuh does the same work in f32 on CUDA cores.
//
// Work split: one block of 4 warps per (query tile of one row, kv head), grid = (n_seqs *
// tiles_per_row, kv_heads). The tile's query rows are the pairs (token, head of the GQA group),
// r = tt * group + g, R = (64 / group) * group <= 64 of them; warp w owns rows 16 w .. 16 w + 15.
// The block walks the keys its rows see in tiles of kFlashKeys, staging each tile's K and V as
// [key][d] in shared memory (the KV cache's own 16-bit type, 16-byte copies, keys gathered
// through the Source's slots; keys past the row's end are zeros, weighed 0). Per key tile a warp
//   S [16 x 64] = Q K^T         mma.sync m16n8k16 (Q in registers as A fragments, scaled)
//   mask, online softmax        on S's accumulators: a row's values sit in the 4 lanes of a quad
//   O [16 x D] = O c + P V      P re-packed from S's accumulators as A fragments, V's B fragments
//                               read transposed by ldmatrix.trans, f32 accumulate
// and at the end divides O by the row's denominator (zeros for a row that sees nothing).
// Operands are the cache's type (f16 or bf16): Q and P are rounded to it, everything else is f32.
//
// Fragment layouts of m16n8k16 (lane = 4 g + t): A a0 (row g, k 2t..2t+1), a1 (g + 8, 2t), a2
// (g, 2t + 8), a3 (g + 8, 2t + 8); B b0 (k 2t..2t+1, col g), b1 (k 2t + 8, col g); C c0 c1 (row
// g, cols 2t, 2t + 1), c2 c3 (row g + 8). The element with the lower index is the lower 16 bits.
//
// Served: head sizes d = dv of 64 or 128, f16 or bf16 caches, groups of at most 64 query heads
// per kv head; other shapes keep attention_kernel.
#pragma once

#include "attention_kernel.cuh"

#include <type_traits>

namespace llaisys::ops::nvidia::attention {

constexpr unsigned kFlashWarps = 4;
constexpr unsigned kFlashRows = 16 * kFlashWarps;  // query rows a block holds at most
constexpr unsigned kFlashKeys = 64;                // keys per staged tile
constexpr unsigned kFlashPad = 8;                  // 16-bit elements of padding per smem row

inline bool flash_serves(llaisysDataType_t kvdt, size_t group, size_t d, size_t dv) {
    return (kvdt == LLAISYS_DTYPE_F16 || kvdt == LLAISYS_DTYPE_BF16) && d == dv && (d == 64 || d == 128) &&
           group >= 1 && group <= kFlashRows;
}

// Query tokens per block: as many as fit 64 rows of the group.
inline size_t flash_tile_tokens(size_t group) { return kFlashRows / group; }

template <class T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    return uint32_t(from_float<T>(lo).bits) | uint32_t(from_float<T>(hi).bits) << 16;
}

// d (4 f32) += a (16 x 16) * b (16 x 8), operands of T (bf16_t or fp16_t).
template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same_v<T, bf16_t>) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                     "{%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    }
}

// b0, b1 = the B fragments (k = 2t, 2t + 1 at column g; k + 8) of two 8 x 8 blocks of 16-bit
// elements stored row by row (a row = 8 consecutive elements, 16-byte aligned), read transposed:
// lanes 0-7 give the rows of the first block, lanes 8-15 those of the second.
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t &b0, uint32_t &b1, const uint16_t *row) {
    const unsigned addr = unsigned(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n" : "=r"(b0), "=r"(b1) : "r"(addr));
}

__device__ __forceinline__ float quad_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
    return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
    v += __shfl_xor_sync(kFullMask, v, 1);
    return v + __shfl_xor_sync(kFullMask, v, 2);
}

// TA: the activations' type (q, out); T: the cache's (the operands'); D: the head size.
template <class TA, class T, int D, class Source>
__global__ void __launch_bounds__(kFlashWarps * 32) flash_kernel(Params p, Source src) {
    constexpr int KS = D + int(kFlashPad);  // sk and sv row stride (elements): 16-byte rows, 4 banks apart
    __shared__ __align__(16) uint16_t sk[kFlashKeys * KS];  // [key][d]
    __shared__ __align__(16) uint16_t sv[kFlashKeys * KS];  // [key][d]
    __shared__ int32_t s_lim[2];                            // the block's first and last key + 1

    const size_t group = p.heads / p.kv_heads;
    const size_t s = blockIdx.x / p.tiles_per_row, tile = blockIdx.x % p.tiles_per_row, kh = blockIdx.y;
    const size_t q0 = src.q_begin(s), q1 = src.q_end(s), q_len = q1 - q0;
    if (q_len < p.min_q_len || q_len > p.max_q_len) return;  // another launch serves this row
    const size_t t0 = q0 + tile * p.tile_tokens;
    if (t0 >= q1) return;
    const size_t n_tok = min(size_t(p.tile_tokens), q1 - t0), R = n_tok * group;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;

    // the two rows of this lane: ra = 16 warp + g, rb = ra + 8, and the keys each sees [nf, nv)
    size_t nv[2] = {0, 0}, nf[2] = {0, 0};
    for (int h = 0; h < 2; h++) {
        const size_t r = 16 * warp + g + 8 * h;
        if (r < R) {
            nv[h] = src.n_visible(s, t0 + r / group);
            nf[h] = min(src.first_visible(s, t0 + r / group), nv[h]);
        }
    }
    if (threadIdx.x == 0) s_lim[0] = INT32_MAX, s_lim[1] = 0;
    __syncthreads();
    if (t == 0) {
        for (int h = 0; h < 2; h++) {
            if (nv[h] > nf[h]) atomicMin(&s_lim[0], int32_t(nf[h])), atomicMax(&s_lim[1], int32_t(nv[h]));
        }
    }
    // Q as A fragments, scaled: qa[kc] covers head columns 16 kc .. 16 kc + 15
    uint32_t qa[D / 16][4];
    const TA *q = static_cast<const TA *>(p.q);
#pragma unroll
    for (int kc = 0; kc < D / 16; kc++) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const size_t r = 16 * warp + g + 8 * (i & 1), c = 16 * kc + 2 * t + 8 * (i >> 1);
            float x0 = 0.0f, x1 = 0.0f;
            if (r < R) {
                const TA *qr = q + (t0 + r / group) * p.q_stride + (kh * group + r % group) * D + c;
                x0 = to_float(qr[0]) * p.scale;
                x1 = to_float(qr[1]) * p.scale;
            }
            qa[kc][i] = pack2<T>(x0, x1);
        }
    }
    float o[D / 8][4];
#pragma unroll
    for (int dt = 0; dt < D / 8; dt++) o[dt][0] = o[dt][1] = o[dt][2] = o[dt][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // l: this lane's share of the sum
    __syncthreads();
    const size_t kv_min = size_t(s_lim[0]), kv_max = size_t(s_lim[1]);
    const T *kc_ = static_cast<const T *>(p.k_cache);
    const T *vc_ = static_cast<const T *>(p.v_cache);

    for (size_t j0 = kv_min; j0 < kv_max; j0 += kFlashKeys) {
        const size_t tk = min(size_t(kFlashKeys), kv_max - j0);
        // 1. stage the tile: each thread moves chunks of 8 elements (16 bytes) of K and of V
        for (unsigned e = threadIdx.x; e < kFlashKeys * (D / 8); e += blockDim.x) {
            const unsigned jj = e / (D / 8), c = (e % (D / 8)) * 8;
            uint4 kx = make_uint4(0, 0, 0, 0), vx = make_uint4(0, 0, 0, 0);
            if (jj < tk) {
                const size_t slot = src.slot(s, j0 + jj);
                kx = *reinterpret_cast<const uint4 *>(kc_ + (slot * p.kv_heads + kh) * D + c);
                vx = *reinterpret_cast<const uint4 *>(vc_ + (slot * p.kv_heads + kh) * D + c);
            }
            *reinterpret_cast<uint4 *>(sk + jj * KS + c) = kx;
            *reinterpret_cast<uint4 *>(sv + jj * KS + c) = vx;
        }
        __syncthreads();
        // 2. S = Q K^T over the tile's 64 keys (8 column tiles of 8 keys)
        float sc[kFlashKeys / 8][4];
#pragma unroll
        for (int nt = 0; nt < int(kFlashKeys / 8); nt++) {
            sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
            for (int kc = 0; kc < D / 16; kc++) {
                const uint16_t *kr = sk + (nt * 8 + g) * KS + 16 * kc + 2 * t;
                mma16816<T>(sc[nt], qa[kc], *reinterpret_cast<const uint32_t *>(kr),
                            *reinterpret_cast<const uint32_t *>(kr + 8));
            }
        }
        // 3. mask, then the online softmax of each of the lane's two rows
        float c_of[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < int(kFlashKeys / 8); nt++) {
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    const size_t j = j0 + nt * 8 + 2 * t + u;
                    float &x = sc[nt][2 * h + u];
                    if (j < nf[h] || j >= nv[h]) x = -INFINITY;
                    mx = fmaxf(mx, x);
                }
            }
            mx = quad_max(mx);
            const float m_new = fmaxf(m[h], mx);
            c_of[h] = m_new == -INFINITY ? 1.0f : expf(m[h] - m_new);  // 0 while m[h] is -inf
            float sum = 0.0f;
#pragma unroll
            for (int nt = 0; nt < int(kFlashKeys / 8); nt++) {
#pragma unroll
                for (int u = 0; u < 2; u++) {
                    float &x = sc[nt][2 * h + u];
                    x = x == -INFINITY ? 0.0f : expf(x - m_new);
                    sum += x;
                }
            }
            l[h] = l[h] * c_of[h] + sum;
            m[h] = m_new;
        }
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            o[dt][0] *= c_of[0], o[dt][1] *= c_of[0];
            o[dt][2] *= c_of[1], o[dt][3] *= c_of[1];
        }
        // 4. O += P V: P's accumulators re-packed as A fragments, 16 keys at a time; lanes 0-15
        //    give ldmatrix the rows (keys 16 kk + lane) of V's two 8 x 8 blocks of columns dt
#pragma unroll
        for (int kk = 0; kk < int(kFlashKeys / 16); kk++) {
            const uint32_t pa[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]), pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                                    pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                    pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
            for (int dt = 0; dt < D / 8; dt++) {
                uint32_t b0, b1;
                ldmatrix_x2_trans(b0, b1, sv + (16 * kk + (lane & 15)) * KS + dt * 8);
                mma16816<T>(o[dt], pa, b0, b1);
            }
        }
        __syncthreads();  // the next tile overwrites sk and sv
    }

    // 5. O / l: each row's sum is spread over its quad's lanes
    TA *out = static_cast<TA *>(p.out);
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const float lsum = quad_sum(l[h]);
        const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
        const size_t r = 16 * warp + g + 8 * h;
        if (r >= R) continue;
        TA *orow = out + (t0 + r / group) * p.out_stride + (kh * group + r % group) * D;
#pragma unroll
        for (int dt = 0; dt < D / 8; dt++) {
            orow[dt * 8 + 2 * t] = from_float<TA>(o[dt][2 * h] * inv);
            orow[dt * 8 + 2 * t + 1] = from_float<TA>(o[dt][2 * h + 1] * inv);
        }
    }
}

// Launches flash_kernel over the rows with [min_q_len, max_q_len] queries (flash_serves holds).
template <class Source>
void launch_flash(const Params &base, const Source &src, llaisysDataType_t act, llaisysDataType_t kvdt,
                  size_t n_seqs, size_t tiles_per_row, size_t min_q_len, size_t max_q_len, cudaStream_t stream) {
    if (n_seqs == 0 || tiles_per_row == 0) return;
    LLAISYS_CHECK(n_seqs * tiles_per_row <= size_t(INT_MAX) && base.kv_heads <= 65535, LLAISYS_STATUS_UNSUPPORTED,
                  "attention: ", n_seqs, " rows x ", tiles_per_row, " query tiles exceed the CUDA grid");
    Params p = base;
    p.tile_tokens = unsigned(flash_tile_tokens(p.heads / p.kv_heads));
    p.tiles_per_row = unsigned(tiles_per_row);
    p.min_q_len = min_q_len;
    p.max_q_len = max_q_len;
    const dim3 grid(unsigned(n_seqs * tiles_per_row), unsigned(p.kv_heads));
    dispatch_float(act, [&](auto atag) {
        using TA = decltype(atag);
        auto go = [&](auto ttag) {
            using T = decltype(ttag);
            if (p.d == 64) flash_kernel<TA, T, 64, Source><<<grid, kFlashWarps * 32, 0, stream>>>(p, src);
            else flash_kernel<TA, T, 128, Source><<<grid, kFlashWarps * 32, 0, stream>>>(p, src);
        };
        if (kvdt == LLAISYS_DTYPE_BF16) go(bf16_t{});
        else go(fp16_t{});
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia::attention

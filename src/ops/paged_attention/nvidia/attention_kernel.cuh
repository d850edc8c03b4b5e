// The CUDA attention kernel behind both paged_attention (the model's path, over the
// block/cell view) and self_attention (a dense causal K/V, the test reference path).
//
// Work split: one block per (query tile of one row, kv head), grid = (n_seqs * tiles_per_row,
// kv_heads). A block serves every query head of its GQA group, so its "query rows" are the
// pairs (token of the tile, head of the group): R = tile_tokens * group rows. It walks the
// row's visible keys in tiles of kKeyTile, staging each K/V tile once in shared memory (as
// f32) for all R query rows, and keeps a running max m, denominator l and weighted sum O per
// query row (online softmax, like the CPU kernel; the CPU rescales key by key, this kernel
// tile by tile, so the two differ by rounding only).
//   decode config:  tile_tokens = 1 (R = group), for rows with few queries
//   prefill config: tile_tokens = max(1, 16 / group), for long query chunks
// Masking: a query row sees keys [first_visible, n_visible) of its row (kv_pos ascends within
// a row, so "kv_pos <= q_pos" is a prefix and, with a sliding window, "kv_pos > q_pos - window"
// a suffix of it, both found by binary search); keys outside score -inf and weigh 0. The walk
// starts at the tile's smallest first_visible, so keys before a window are never read. A row
// that sees nothing (l == 0) writes zeros, as the CPU does.
//
// Shared memory (f32 unless noted), R rows, TK = kKeyTile keys, padded against bank conflicts:
//   q   [R][d]        scaled queries          k  [TK][d + 1]     one K tile
//   v   [TK][dv]      one V tile              s  [R][TK + 1]     scores, then weights
//   o   [R][dv]       running weighted sums   m, l, c [R]        max, denominator, rescale
//   n_visible [R] (i32), kv_max (i32): the most keys any row of the block sees
//   first [R] (i32), kv_min (i32): the first key each row sees, the least of them
#pragma once

#include "../../../device/nvidia/cuda_check.hpp"
#include "../../../device/nvidia/cuda_kernel_utils.cuh"
#include "../cpu/paged_attention_cpu.hpp"

#include <climits>

namespace llaisys::ops::nvidia::attention {

using namespace llaisys::device::nvidia;

constexpr unsigned kThreads = 128;  // 4 warps
constexpr unsigned kKeyTile = 32;   // keys per staged K/V tile (a multiple of 32: one per lane)

// The paged view (every array DEVICE memory): row s has tokens [query_start[s], [s+1]) and
// entries [kv_start[s], [s+1]) of kv_slots / kv_pos.
struct PagedSource {
    const int32_t *query_start;  // [n_seqs + 1]
    const int64_t *q_pos;        // [n_tokens]
    const int32_t *kv_start;     // [n_seqs + 1]
    const int32_t *kv_slots;     // [kv_start[n_seqs]]
    const int64_t *kv_pos;       // [kv_start[n_seqs]]
    int64_t window = 0;          // > 0: sliding window (kv_pos > q_pos - window); 0: none

    __device__ size_t q_begin(size_t s) const { return size_t(query_start[s]); }
    __device__ size_t q_end(size_t s) const { return size_t(query_start[s + 1]); }
    __device__ size_t kv_begin(size_t s) const { return size_t(kv_start[s]); }
    __device__ size_t slot(size_t s, size_t j) const { return size_t(kv_slots[kv_begin(s) + j]); }
    // Entries of row s with kv_pos <= q_pos[t]: upper_bound over the ascending positions.
    // A decode token sees its whole row (its own key is the last): one read answers that.
    __device__ size_t n_visible(size_t s, size_t t) const {
        const int64_t qp = q_pos[t];
        size_t lo = size_t(kv_start[s]), hi = size_t(kv_start[s + 1]);
        const size_t begin = lo;
        if (lo == hi || kv_pos[hi - 1] <= qp) return hi - begin;
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (kv_pos[mid] <= qp) lo = mid + 1;
            else hi = mid;
        }
        return lo - begin;
    }
    // The first entry of row s with kv_pos > q_pos[t] - window (0 without a window).
    __device__ size_t first_visible(size_t s, size_t t) const {
        const int64_t qp = q_pos[t];
        if (window <= 0 || qp < INT64_MIN + window) return 0;
        const int64_t bound = qp - window;
        size_t lo = size_t(kv_start[s]), hi = size_t(kv_start[s + 1]);
        const size_t begin = lo;
        while (lo < hi) {
            const size_t mid = lo + (hi - lo) / 2;
            if (kv_pos[mid] <= bound) lo = mid + 1;
            else hi = mid;
        }
        return lo - begin;
    }
};

// The BLOCK layout read through its block tables, as the engine hands them over (no per-key
// list flattened on the host): key j of row s holds position j and sits in slot
// table[s][j / block_size] * block_size + j % block_size; a query at position q sees keys
// 0 ..= q of its row (the batch's validation guarantees q < context_lens[s] and that every
// table entry a row uses is a block of the pool).
struct BlockSource {
    const int32_t *query_start;   // [n_seqs + 1]
    const int64_t *q_pos;         // [n_tokens]
    const int32_t *block_tables;  // [n_seqs, max_blocks]
    const int32_t *context_lens;  // [n_seqs]
    size_t max_blocks, block_size;
    int64_t window = 0;  // > 0: sliding window (position > q_pos - window); 0: none

    __device__ size_t q_begin(size_t s) const { return size_t(query_start[s]); }
    __device__ size_t q_end(size_t s) const { return size_t(query_start[s + 1]); }
    // (32-bit division: a row's keys are counted by int32 context lengths)
    __device__ size_t slot(size_t s, size_t j) const {
        const unsigned jj = unsigned(j), bs = unsigned(block_size);
        return size_t(block_tables[s * max_blocks + jj / bs]) * block_size + jj % bs;
    }
    __device__ size_t n_visible(size_t s, size_t t) const {
        const int64_t q = q_pos[t];
        const size_t ctx = size_t(context_lens[s]);
        return q < 0 ? 0 : (size_t(q) + 1 < ctx ? size_t(q) + 1 : ctx);
    }
    __device__ size_t first_visible(size_t, size_t t) const {
        if (window <= 0) return 0;
        const int64_t first = q_pos[t] - window + 1;  // positions > q - window
        return first > 0 ? size_t(first) : 0;
    }
};

// self_attention: one row of q_len tokens over kv_len keys stored densely (key j in slot
// j); token i sits at position kv_len - q_len + i and sees keys 0 ..= that position.
struct DenseSource {
    size_t q_len, kv_len;

    __device__ size_t q_begin(size_t) const { return 0; }
    __device__ size_t q_end(size_t) const { return q_len; }
    __device__ size_t slot(size_t, size_t j) const { return j; }
    __device__ size_t n_visible(size_t, size_t t) const { return kv_len - q_len + t + 1; }
    __device__ size_t first_visible(size_t, size_t) const { return 0; }
};

struct Params {
    void *out;            // [n_tokens, heads, dv], rows out_stride elements apart (act)
    size_t out_stride;
    const void *q;        // [n_tokens, heads, d], rows q_stride elements apart (act)
    size_t q_stride;
    const void *k_cache;  // [n_slots, kv_heads, d] (kv dtype)
    const void *v_cache;  // [n_slots, kv_heads, dv] (kv dtype)
    size_t heads, kv_heads, d, dv;
    float scale;
    unsigned tile_tokens;    // query tokens per block
    unsigned tiles_per_row;  // grid.x = n_seqs * tiles_per_row
    size_t min_q_len;        // rows whose query count is outside [min_q_len, max_q_len]
    size_t max_q_len;        //   are left to another launch
};

inline size_t smem_bytes(size_t rows, size_t d, size_t dv) {
    const size_t floats = rows * d + kKeyTile * (d + 1) + kKeyTile * dv + rows * (kKeyTile + 1) + rows * dv + 3 * rows;
    return floats * sizeof(float) + (2 * rows + 2) * sizeof(int32_t);
}

template <class TA, class TK, class Source>
__global__ void __launch_bounds__(kThreads) attention_kernel(Params p, Source src) {
    extern __shared__ float smem[];
    const size_t group = p.heads / p.kv_heads, d = p.d, dv = p.dv;
    const size_t s = blockIdx.x / p.tiles_per_row, tile = blockIdx.x % p.tiles_per_row;
    const size_t kh = blockIdx.y;
    const size_t q0 = src.q_begin(s), q1 = src.q_end(s), q_len = q1 - q0;
    if (q_len < p.min_q_len || q_len > p.max_q_len) return;  // another launch serves this row
    const size_t t0 = q0 + tile * p.tile_tokens;
    if (t0 >= q1) return;  // the row has fewer tiles than the longest one
    const size_t n_tok = min(size_t(p.tile_tokens), q1 - t0);
    const size_t R = size_t(p.tile_tokens) * group;  // rows r = tt * group + g

    float *sq = smem;                              // [R][d]
    float *sk = sq + R * d;                        // [TK][d + 1]
    float *sv = sk + kKeyTile * (d + 1);           // [TK][dv]
    float *ss = sv + kKeyTile * dv;                // [R][TK + 1]
    float *so = ss + R * (kKeyTile + 1);           // [R][dv]
    float *sm = so + R * dv;                       // [R]
    float *sl = sm + R;                            // [R]
    float *sc = sl + R;                            // [R]
    int32_t *snv = reinterpret_cast<int32_t *>(sc + R);  // [R]
    int32_t *skv_max = snv + R;                    // [1]
    int32_t *snf = skv_max + 1;                    // [R]
    int32_t *skv_min = snf + R;                    // [1]

    const TA *q = static_cast<const TA *>(p.q);
    const TK *kc = static_cast<const TK *>(p.k_cache);
    const TK *vc = static_cast<const TK *>(p.v_cache);

    // queries of the tile, scaled (rows past the row's last token are zero and see nothing)
    for (size_t e = threadIdx.x; e < R * d; e += blockDim.x) {
        const size_t r = e / d, c = e % d, tt = r / group, g = r % group;
        float x = 0.0f;
        if (tt < n_tok) x = to_float(q[(t0 + tt) * p.q_stride + (kh * group + g) * d + c]) * p.scale;
        sq[e] = x;
    }
    for (size_t e = threadIdx.x; e < R * dv; e += blockDim.x) so[e] = 0.0f;
    for (size_t r = threadIdx.x; r < R; r += blockDim.x) {
        const size_t tt = r / group;
        snv[r] = tt < n_tok ? int32_t(src.n_visible(s, t0 + tt)) : 0;
        snf[r] = tt < n_tok ? int32_t(src.first_visible(s, t0 + tt)) : INT32_MAX;
        sm[r] = -INFINITY;
        sl[r] = 0.0f;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t mx = 0, mn = INT32_MAX;
        for (size_t r = 0; r < R; r++) mx = max(mx, snv[r]), mn = min(mn, snf[r]);
        *skv_max = mx;
        *skv_min = min(mn, mx);
    }
    __syncthreads();
    const size_t kv_max = size_t(*skv_max), kv_min = size_t(*skv_min);
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;

    for (size_t j0 = kv_min; j0 < kv_max; j0 += kKeyTile) {
        const size_t tk = min(size_t(kKeyTile), kv_max - j0);  // keys in this tile
        // 1. stage K and V of keys j0 .. j0 + tk (zeros past them: they are weighed 0, and
        //    0 * garbage could be NaN)
        for (size_t e = threadIdx.x; e < kKeyTile * d; e += blockDim.x) {
            const size_t jj = e / d, c = e % d;
            sk[jj * (d + 1) + c] = jj < tk ? to_float(kc[(src.slot(s, j0 + jj) * p.kv_heads + kh) * d + c]) : 0.0f;
        }
        for (size_t e = threadIdx.x; e < kKeyTile * dv; e += blockDim.x) {
            const size_t jj = e / dv, c = e % dv;
            sv[e] = jj < tk ? to_float(vc[(src.slot(s, j0 + jj) * p.kv_heads + kh) * dv + c]) : 0.0f;
        }
        __syncthreads();
        // 2. scores of every (row, key) pair; keys a row does not see score -inf
        for (size_t e = threadIdx.x; e < R * kKeyTile; e += blockDim.x) {
            const size_t r = e / kKeyTile, jj = e % kKeyTile;
            float score = -INFINITY;
            if (j0 + jj < size_t(snv[r]) && j0 + jj >= size_t(snf[r])) {
                const float *qr = sq + r * d, *kr = sk + jj * (d + 1);
                score = 0.0f;
                for (size_t c = 0; c < d; c++) score += qr[c] * kr[c];
            }
            ss[r * (kKeyTile + 1) + jj] = score;
        }
        __syncthreads();
        // 3. online softmax, one warp per row: new max, rescale factor, weights in place
        for (size_t r = warp; r < R; r += n_warps) {
            float *sr = ss + r * (kKeyTile + 1);
            float tmax = -INFINITY;
            for (unsigned jj = lane; jj < kKeyTile; jj += 32) tmax = fmaxf(tmax, sr[jj]);
            tmax = warp_max(tmax);
            if (tmax == -INFINITY) {  // the row sees no key of this tile: nothing changes
                for (unsigned jj = lane; jj < kKeyTile; jj += 32) sr[jj] = 0.0f;
                if (lane == 0) sc[r] = 1.0f;
                continue;
            }
            const float m_old = sm[r], m_new = fmaxf(m_old, tmax);
            float sum = 0.0f;
            for (unsigned jj = lane; jj < kKeyTile; jj += 32) {
                const float w = expf(sr[jj] - m_new);  // exp(-inf) = 0 for unseen keys
                sr[jj] = w;
                sum += w;
            }
            sum = warp_sum(sum);
            // every lane has read sm[r] (m_old) before lane 0 overwrites it: the shuffles of
            // warp_sum converge the warp, but only __syncwarp orders its shared-memory accesses
            // (compute-sanitizer racecheck flagged this read/write pair on an H200)
            __syncwarp();
            if (lane == 0) {
                const float c = expf(m_old - m_new);  // 0 when m_old is -inf (l and o are 0)
                sc[r] = c;
                sl[r] = sl[r] * c + sum;
                sm[r] = m_new;
            }
        }
        __syncthreads();
        // 4. o = o * c + weights @ V
        for (size_t e = threadIdx.x; e < R * dv; e += blockDim.x) {
            const size_t r = e / dv, c = e % dv;
            const float *wr = ss + r * (kKeyTile + 1);
            float acc = so[e] * sc[r];
            for (size_t jj = 0; jj < tk; jj++) acc += wr[jj] * sv[jj * dv + c];
            so[e] = acc;
        }
        __syncthreads();  // the next tile overwrites sk, sv and ss
    }

    TA *out = static_cast<TA *>(p.out);
    for (size_t e = threadIdx.x; e < R * dv; e += blockDim.x) {
        const size_t r = e / dv, c = e % dv, tt = r / group, g = r % group;
        if (tt >= n_tok) continue;
        const float inv = sl[r] > 0.0f ? 1.0f / sl[r] : 0.0f;
        out[(t0 + tt) * p.out_stride + (kh * group + g) * dv + c] = from_float<TA>(so[e] * inv);
    }
}

// Launches attention_kernel over n_seqs rows with `tile_tokens` query tokens per block.
template <class Source>
void launch(const Params &base, const Source &src, llaisysDataType_t act, llaisysDataType_t kvdt, size_t n_seqs,
            size_t tile_tokens, size_t tiles_per_row, size_t min_q_len, size_t max_q_len, cudaStream_t stream) {
    if (n_seqs == 0 || tiles_per_row == 0) return;
    LLAISYS_CHECK(n_seqs * tiles_per_row <= size_t(INT_MAX), LLAISYS_STATUS_UNSUPPORTED, "attention: ", n_seqs,
                  " rows x ", tiles_per_row, " query tiles exceed the CUDA grid");
    LLAISYS_CHECK(base.kv_heads <= 65535, LLAISYS_STATUS_UNSUPPORTED, "attention: ", base.kv_heads,
                  " kv heads exceed the CUDA grid's y limit (65535)");
    Params p = base;
    p.tile_tokens = unsigned(tile_tokens);
    p.tiles_per_row = unsigned(tiles_per_row);
    p.min_q_len = min_q_len;
    p.max_q_len = max_q_len;
    const size_t rows = tile_tokens * (p.heads / p.kv_heads);
    const size_t bytes = smem_bytes(rows, p.d, p.dv);
    int device = 0, optin = 0;
    LLAISYS_CUDA_CHECK(cudaGetDevice(&device));
    LLAISYS_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    LLAISYS_CHECK(bytes <= size_t(optin), LLAISYS_STATUS_UNSUPPORTED, "attention: ", rows, " query rows per block with head dims ",
                  p.d, "/", p.dv, " need ", bytes, " bytes of shared memory; the device allows ", optin);
    const dim3 grid(unsigned(n_seqs * tiles_per_row), unsigned(p.kv_heads));
    dispatch_float(act, [&](auto atag) {
        using TA = decltype(atag);
        dispatch_float(kvdt, [&](auto ktag) {
            using TKV = decltype(ktag);
            auto kernel = attention_kernel<TA, TKV, Source>;
            if (bytes > 48 * 1024) {
                LLAISYS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
            }
            kernel<<<grid, kThreads, bytes, stream>>>(p, src);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

// Query tokens per block for long query chunks: about 16 query rows per block.
inline size_t prefill_tile_tokens(size_t group) { return group >= 16 ? 1 : 16 / group; }

}  // namespace llaisys::ops::nvidia::attention

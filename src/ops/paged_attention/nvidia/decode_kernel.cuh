// Split-K attention for decode rows (flash-decoding): the rows of at most a few queries that
// attention_kernel.cuh's decode configuration would give one block per (token, kv head).
// That block walks the whole context alone, so one decode row kept kv_heads multiprocessors
// busy (2 of an H200's 132 for Qwen2.5-1.5B) and its time grew with the context.
//
// Here the visible keys of each (token, kv head) are cut into n_splits contiguous ranges, one
// block each: grid = (n_seqs * tiles_per_row, kv_heads, n_splits). In a block each warp takes
// every kDecodeWarps-th key of the range; a lane holds elements lane, lane + 32, ... of the
// query and of its running output for every query head of the GQA group, so a key costs the
// warp one coalesced read of its K and V rows, a dot product per head (a shuffle sum) and an
// online-softmax update per head, all in registers. The warps' (max, denominator, weighted
// sum) are merged in shared memory; with one split that is the answer (sum / denominator,
// zeros for a token that sees nothing), else the block writes its partial state and the last
// split of its (token, kv head) to finish merges them in the same launch (merge_splits).
// The same function as attention_kernel up to f32 rounding (summation order and where the
// running max is rescaled).
//
// Served: query heads per kv head <= kDecodeMaxGroup and head sizes <= kDecodeMaxHead; other
// shapes keep attention_kernel's decode configuration.
#pragma once

#include "attention_kernel.cuh"

namespace llaisys::ops::nvidia::attention {

constexpr unsigned kDecodeWarps = 4;
constexpr size_t kDecodeMaxGroup = 8;
constexpr size_t kDecodeMaxHead = 128;
constexpr int kLaneElems = int(kDecodeMaxHead / 32);
constexpr size_t kMinKeysPerSplit = 16;  // 4 keys per warp at least
constexpr size_t kMaxSplits = 64;

// Partial states of split z of query head h of block x: ml[(x * heads + h) * n_splits + z]
// (running max, denominator), o[that * dv ..] (weighted sum of V rows). done[x * kv_heads + kh]
// counts the splits of (x, kh) that have written theirs: zero before the launch, and the last
// split, which merges them, sets it back to zero.
struct Partials {
    float2 *ml;
    float *o;
    unsigned *done;
    unsigned n_splits;
};

inline bool decode_split_serves(size_t group, size_t d, size_t dv) {
    return group <= kDecodeMaxGroup && d <= kDecodeMaxHead && dv <= kDecodeMaxHead;
}

// The token block x serves (q0 + tile of row s), or SIZE_MAX if its row is not in
// [min_q_len, max_q_len] or has fewer tokens than tile + 1.
template <class Source>
__device__ __forceinline__ size_t decode_token(const Params &p, const Source &src, size_t x, size_t *row) {
    const size_t s = x / p.tiles_per_row, tile = x % p.tiles_per_row;
    const size_t q0 = src.q_begin(s), q1 = src.q_end(s), q_len = q1 - q0;
    *row = s;
    if (q_len < p.min_q_len || q_len > p.max_q_len || q0 + tile >= q1) return SIZE_MAX;
    return q0 + tile;
}

// The outputs of token t's query heads h0 .. h0 + group (block x) from their n_splits partial
// states, which other blocks of this launch wrote: read through L2 (ld.global.cg), never a
// stale L1 line. M = max m_z, L = sum l_z e^(m_z - M), O = sum o_z e^(m_z - M). Every (head,
// split) state is loaded at once into shared memory, the factors e^(m_z - M) / L computed
// once per (head, split), then each thread sums its outputs' o_z, all loads independent: a
// few L2 round trips in all, not a chain of them per head.
// The first half of a split merge (merge_splits here, merge_splits_wide in
// decode_wide_kernel.cuh): every (head, split) state of token block x loaded at once into shared
// memory, then, one thread a head, M, L and each split's factor e^(m_z - M) / L in place of m_z
// (0 for a split that saw no key), all in s_f [head][split]. Returns s_f.
__device__ inline const float (*split_factors(const Params &p, const Partials &part, size_t x, size_t h0,
                                              size_t group))[kMaxSplits] {
    __shared__ float s_f[kDecodeMaxGroup][kMaxSplits];  // m_z, then e^(m_z - M) / L
    __shared__ float s_l[kDecodeMaxGroup][kMaxSplits];  // l_z
    const unsigned nz = part.n_splits;
    for (size_t e = threadIdx.x; e < group * nz; e += blockDim.x) {
        const float2 ml = __ldcg(&part.ml[(x * p.heads + h0 + e / nz) * nz + e % nz]);
        s_f[e / nz][e % nz] = ml.x;
        s_l[e / nz][e % nz] = ml.y;
    }
    __syncthreads();
    if (threadIdx.x < group) {  // one thread a head: M, L, then the factors in place of m_z
        const size_t g = threadIdx.x;
        float mx = -INFINITY;
        for (unsigned z = 0; z < nz; z++) mx = fmaxf(mx, s_f[g][z]);
        float lsum = 0.0f;
        if (mx != -INFINITY) {
            for (unsigned z = 0; z < nz; z++) {
                if (s_f[g][z] != -INFINITY) lsum += s_l[g][z] * expf(s_f[g][z] - mx);
            }
        }
        const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
        for (unsigned z = 0; z < nz; z++) s_f[g][z] = s_f[g][z] != -INFINITY ? expf(s_f[g][z] - mx) * inv : 0.0f;
    }
    __syncthreads();
    return s_f;
}

template <class TA>
__device__ void merge_splits(const Params &p, const Partials &part, size_t x, size_t t, size_t h0, size_t group) {
    const float(*s_f)[kMaxSplits] = split_factors(p, part, x, h0, group);
    const unsigned nz = part.n_splits;
    for (size_t e = threadIdx.x; e < group * p.dv; e += blockDim.x) {
        const size_t g = e / p.dv, c = e % p.dv;
        const float *o = part.o + ((x * p.heads + h0 + g) * nz) * p.dv + c;
        float osum = 0.0f;
        unsigned z = 0;
        for (; z + 4 <= nz; z += 4) {  // four loads in flight
            const float o0 = __ldcg(o + size_t(z) * p.dv), o1 = __ldcg(o + size_t(z + 1) * p.dv);
            const float o2 = __ldcg(o + size_t(z + 2) * p.dv), o3 = __ldcg(o + size_t(z + 3) * p.dv);
            osum += o0 * s_f[g][z];
            osum += o1 * s_f[g][z + 1];
            osum += o2 * s_f[g][z + 2];
            osum += o3 * s_f[g][z + 3];
        }
        for (; z < nz; z++) osum += __ldcg(o + size_t(z) * p.dv) * s_f[g][z];
        static_cast<TA *>(p.out)[t * p.out_stride + (h0 + g) * p.dv + c] = from_float<TA>(osum);
    }
}

// The end of a decode block, shared by decode_kernel and decode_wide_kernel: the W warps' states
// (m_at(w, g), l_at(w, g), o_at(w, g, c), in shared memory and synchronized) merged per (head g,
// element c), then written: token t's output with one split, else this split's partial state,
// after which one thread takes the (x, kh) ticket. Returns whether this block is the last split
// to finish, which then merges them all and sets the ticket back to zero.
template <class TA, unsigned W, class M, class L, class O>
__device__ bool finish_decode_block(const Params &p, const Partials &part, size_t x, size_t kh, size_t z, size_t t,
                                    size_t group, size_t dv, M m_at, L l_at, O o_at) {
    for (size_t e = threadIdx.x; e < group * dv; e += blockDim.x) {
        const size_t g = e / dv, c = e % dv;
        float mx = -INFINITY;
        for (unsigned w = 0; w < W; w++) mx = fmaxf(mx, m_at(w, g));
        float lsum = 0.0f, osum = 0.0f;
        if (mx != -INFINITY) {
            for (unsigned w = 0; w < W; w++) {
                if (m_at(w, g) == -INFINITY) continue;  // the warp saw no key
                const float f = expf(m_at(w, g) - mx);
                lsum += l_at(w, g) * f;
                osum += o_at(w, g, c) * f;
            }
        }
        const size_t h = kh * group + g;
        if (part.n_splits == 1) {
            const float inv = lsum > 0.0f ? 1.0f / lsum : 0.0f;
            static_cast<TA *>(p.out)[t * p.out_stride + h * dv + c] = from_float<TA>(osum * inv);
        } else {
            const size_t idx = (x * p.heads + h) * part.n_splits + z;
            part.o[idx * dv + c] = osum;
            if (c == 0) part.ml[idx] = make_float2(mx, lsum);
        }
    }
    if (part.n_splits == 1) return false;
    // The last split of (x, kh) to finish merges all of them (no second launch): every thread's
    // partial writes are made visible device-wide before one thread takes a ticket.
    __shared__ bool s_last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(&part.done[x * p.kv_heads + kh], 1u) == part.n_splits - 1;
    __syncthreads();
    if (!s_last) return false;
    __threadfence();
    return true;
}

template <class TA, class TK, class Source>
__global__ void __launch_bounds__(kDecodeWarps * 32) decode_kernel(Params p, Source src, Partials part) {
    __shared__ float s_m[kDecodeWarps][kDecodeMaxGroup], s_l[kDecodeWarps][kDecodeMaxGroup];
    __shared__ float s_o[kDecodeWarps][kDecodeMaxGroup][kDecodeMaxHead];
    const size_t x = blockIdx.x, kh = blockIdx.y, z = blockIdx.z;
    size_t s = 0;
    const size_t t = decode_token(p, src, x, &s);
    if (t == SIZE_MAX) return;
    const size_t group = p.heads / p.kv_heads, d = p.d, dv = p.dv;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    const size_t nv = src.n_visible(s, t), first = min(src.first_visible(s, t), nv);
    const size_t span = nv - first, chunk = (span + part.n_splits - 1) / part.n_splits;
    const size_t j0 = first + min(span, z * chunk), j1 = first + min(span, (z + 1) * chunk);

    float q[kDecodeMaxGroup][kLaneElems], o[kDecodeMaxGroup][kLaneElems], m[kDecodeMaxGroup], l[kDecodeMaxGroup];
    const TA *qt = static_cast<const TA *>(p.q) + t * p.q_stride + kh * group * d;
#pragma unroll
    for (size_t g = 0; g < kDecodeMaxGroup; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < kLaneElems; i++) {
            const size_t c = lane + 32 * size_t(i);
            q[g][i] = g < group && c < d ? to_float(qt[g * d + c]) * p.scale : 0.0f;
            o[g][i] = 0.0f;
        }
    }
    const TK *kc = static_cast<const TK *>(p.k_cache);
    const TK *vc = static_cast<const TK *>(p.v_cache);
    // The warp's keys are j0 + warp, + kDecodeWarps, ...: lane L reads the slot of the L-th of
    // the next 32 at once, and the keys are taken two at a time, both K/V rows read before
    // either is used (each read is otherwise a memory round trip of its own).
    auto update = [&](const float(&kx)[kLaneElems], const float(&vx)[kLaneElems]) {
#pragma unroll
        for (size_t g = 0; g < kDecodeMaxGroup; g++) {
            if (g < group) {
                float score = 0.0f;
#pragma unroll
                for (int i = 0; i < kLaneElems; i++) score = fmaf(q[g][i], kx[i], score);
                score = warp_sum(score);
                const float m_new = fmaxf(m[g], score);
                const float c = expf(m[g] - m_new);  // 0 while m[g] is -inf (l and o are 0)
                const float wgt = expf(score - m_new);
                l[g] = l[g] * c + wgt;
#pragma unroll
                for (int i = 0; i < kLaneElems; i++) o[g][i] = fmaf(o[g][i], c, wgt * vx[i]);
                m[g] = m_new;
            }
        }
    };
    auto load = [&](long long slot, float(&kx)[kLaneElems], float(&vx)[kLaneElems]) {
        const TK *kr = kc + (size_t(slot) * p.kv_heads + kh) * d;
        const TK *vr = vc + (size_t(slot) * p.kv_heads + kh) * dv;
#pragma unroll
        for (int i = 0; i < kLaneElems; i++) {
            const size_t c = lane + 32 * size_t(i);
            kx[i] = c < d ? to_float(kr[c]) : 0.0f;
            vx[i] = c < dv ? to_float(vr[c]) : 0.0f;
        }
    };
    for (size_t jb = j0 + warp; jb < j1; jb += 32 * kDecodeWarps) {
        const size_t jl = jb + size_t(lane) * kDecodeWarps;
        const long long my_slot = jl < j1 ? (long long)src.slot(s, jl) : 0;
        const unsigned nk = unsigned(min(size_t(32), (j1 - jb + kDecodeWarps - 1) / kDecodeWarps));
        for (unsigned u = 0; u < nk; u += 2) {
            const bool two = u + 1 < nk;
            const long long sa = __shfl_sync(kFullMask, my_slot, int(u));
            const long long sb = __shfl_sync(kFullMask, my_slot, int(two ? u + 1 : u));
            float ka[kLaneElems], va[kLaneElems], kb[kLaneElems], vb[kLaneElems];
            load(sa, ka, va);
            load(sb, kb, vb);
            update(ka, va);
            if (two) update(kb, vb);
        }
    }
    // merge the warps
#pragma unroll
    for (size_t g = 0; g < kDecodeMaxGroup; g++) {
        if (g < group) {
            if (lane == 0) s_m[warp][g] = m[g], s_l[warp][g] = l[g];
#pragma unroll
            for (int i = 0; i < kLaneElems; i++) {
                const size_t c = lane + 32 * size_t(i);
                if (c < dv) s_o[warp][g][c] = o[g][i];
            }
        }
    }
    __syncthreads();
    if (!finish_decode_block<TA, kDecodeWarps>(
            p, part, x, kh, z, t, group, dv, [&](unsigned w, size_t g) { return s_m[w][g]; },
            [&](unsigned w, size_t g) { return s_l[w][g]; }, [&](unsigned w, size_t g, size_t c) { return s_o[w][g][c]; })) {
        return;
    }
    merge_splits<TA>(p, part, x, t, kh * group, group);
    if (threadIdx.x == 0) part.done[x * p.kv_heads + kh] = 0;  // ready for the next launch
}

// How many splits: enough blocks for two per multiprocessor, at least kMinKeysPerSplit keys a
// split (max_kv_len bounds a row's visible keys), at most kMaxSplits.
// (min_keys: the wide kernel asks for its own, kWideMinKeysPerSplit.)
inline size_t decode_splits(size_t blocks, size_t max_kv_len, int device, size_t min_keys = kMinKeysPerSplit) {
    int sms = 0;
    LLAISYS_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    size_t n = ceil_div(2 * size_t(sms > 0 ? sms : 1), blocks > 0 ? blocks : 1);
    n = min(n, ceil_div(max_kv_len > 0 ? max_kv_len : 1, min_keys));
    return n < 1 ? 1 : (n > kMaxSplits ? kMaxSplits : n);
}

// Scratch floats the partial states of `blocks` x blocks and n_splits need (0 for one split).
inline size_t decode_partial_floats(size_t blocks, size_t heads, size_t dv, size_t n_splits) {
    return n_splits <= 1 ? 0 : blocks * heads * n_splits * (dv + 2);
}

// The launch's Params for one token a block (both decode kernels), its grid checked.
inline Params decode_params(const Params &base, size_t n_seqs, size_t tiles_per_row, size_t min_q_len,
                            size_t max_q_len, size_t n_splits) {
    LLAISYS_CHECK(n_seqs * tiles_per_row <= size_t(INT_MAX) && base.kv_heads <= 65535 && base.heads <= 65535 &&
                      n_splits <= kMaxSplits,
                  LLAISYS_STATUS_UNSUPPORTED, "attention: ", n_seqs, " rows x ", tiles_per_row,
                  " tokens exceed the CUDA grid");
    Params p = base;
    p.tile_tokens = 1;
    p.tiles_per_row = unsigned(tiles_per_row);
    p.min_q_len = min_q_len;
    p.max_q_len = max_q_len;
    return p;
}

// Launches decode_kernel over the tokens of rows with [min_q_len, max_q_len] queries,
// tiles_per_row tokens of each. With n_splits > 1, `scratch` holds decode_partial_floats(...)
// floats, 8-byte aligned, and `done` n_seqs * tiles_per_row * kv_heads zeros (left zero).
template <class Source>
void launch_decode(const Params &base, const Source &src, llaisysDataType_t act, llaisysDataType_t kvdt,
                   size_t n_seqs, size_t tiles_per_row, size_t min_q_len, size_t max_q_len, size_t n_splits,
                   float *scratch, unsigned *done, cudaStream_t stream) {
    if (n_seqs == 0 || tiles_per_row == 0) return;
    const Params p = decode_params(base, n_seqs, tiles_per_row, min_q_len, max_q_len, n_splits);
    const size_t blocks = n_seqs * tiles_per_row;
    Partials part{nullptr, nullptr, done, unsigned(n_splits)};
    if (n_splits > 1) {
        part.ml = reinterpret_cast<float2 *>(scratch);
        part.o = scratch + 2 * blocks * p.heads * n_splits;
    }
    dispatch_float(act, [&](auto atag) {
        using TA = decltype(atag);
        dispatch_float(kvdt, [&](auto ktag) {
            using TKV = decltype(ktag);
            decode_kernel<TA, TKV, Source><<<dim3(unsigned(blocks), unsigned(p.kv_heads), unsigned(n_splits)),
                                             kDecodeWarps * 32, 0, stream>>>(p, src, part);
        });
    });
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia::attention

// Decode attention with 16-byte K/V loads and a tile of keys in flight per warp
// (LLAISYS_WIDE_DECODE=1; opt-in until it has run on a GPU, then the decode kernel for the
// shapes it serves). Same grid and split-K scheme as decode_kernel.cuh, which it replaces for
// f32 queries over an f16 / bf16 cache with head size 64 or 128 and at most 8 query heads per
// kv head (every model we serve, on the engine's default f16 KV).
//
// Why: decode_kernel reads a key as 2-byte loads, one element per lane, two keys at a time,
// each pair a memory round trip; on the H200 that made decode attention 609 us of a 2,294 us
// bf16 step at a 70-token context and halved decode speed at 4k tokens (doc/nvidia.md). Its
// split merge, done by one block, also walks the splits 4 loads at a time.
//
// Here a key's row is read by D / 8 lanes, 16 bytes (8 elements) each, so a warp reads
// 32 / (D / 8) keys per load instruction (2 at D = 128, 4 at D = 64), and a warp takes its keys
// in tiles of kWideTileKeys = 8: the tile's K and V chunks are copied to shared memory with
// cp.async, all in flight before one wait, and the next tile's slots are read meanwhile. q
// (scaled) waits in shared memory; a lane keeps its 8 elements of the running output for every
// query head of the GQA group. Per tile: the scores (a dot product of 8 and a butterfly over
// the key's lanes, which leaves every lane of the key the same bits), the tile's max over the
// warp, one online-softmax rescale per head and tile (not per key), the weighted V rows. The
// warp's key groups are summed at the end, the warps merged in shared memory, and the splits of
// a (token, kv head) merged by the last one to finish (as decode_kernel) with float4 loads, 8
// splits in flight per thread.
#pragma once

#include "decode_kernel.cuh"

#include <cuda_fp16.h>

#include <cstdint>

namespace llaisys::ops::nvidia::attention {

constexpr unsigned kWideWarps = 8;
constexpr int kWideTileKeys = 8;               // keys a warp loads before using any
constexpr size_t kWideMinKeysPerSplit = 64;    // one tile for every warp of the block
constexpr size_t kWideMaxGroup = 8;
static_assert(kWideMaxGroup <= kDecodeMaxGroup, "split_factors holds kDecodeMaxGroup heads");

inline bool aligned16(const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The shapes and buffers the wide kernel serves (the caller's other conditions: decode rows).
inline bool wide_decode_serves(llaisysDataType_t act, llaisysDataType_t kvdt, size_t group, size_t d, size_t dv,
                               const void *k_cache, const void *v_cache) {
    return act == LLAISYS_DTYPE_F32 && (kvdt == LLAISYS_DTYPE_F16 || kvdt == LLAISYS_DTYPE_BF16) && group >= 1 &&
           group <= kWideMaxGroup && d == dv && (d == 64 || d == 128) && aligned16(k_cache) && aligned16(v_cache);
}

// The 8 elements of a 16-byte load as floats.
template <class TK>
__device__ __forceinline__ void unpack8(const uint4 &r, float (&x)[8]);

template <>
__device__ __forceinline__ void unpack8<fp16_t>(const uint4 &r, float (&x)[8]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2 *>(&w[i]));
        x[2 * i] = f.x;
        x[2 * i + 1] = f.y;
    }
}

template <>
__device__ __forceinline__ void unpack8<bf16_t>(const uint4 &r, float (&x)[8]) {
    const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        x[2 * i] = __uint_as_float(w[i] << 16);
        x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
}

// A 16-byte asynchronous copy from global to shared memory (sm_80 and later), around L1. The
// "memory" clobber keeps the compiler from moving the previous tile's shared-memory reads of the
// same chunk after it.
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() {
    asm volatile("cp.async.commit_group;\n\tcp.async.wait_group 0;" ::: "memory");
}

// decode_kernel's merge_splits with the partial sums read as float4, 8 splits in flight: the
// outputs of token t's heads h0 .. h0 + group from part's n_splits states (o first in the
// scratch, so 16-byte aligned; see launch_wide_decode).
template <int D>
__device__ void merge_splits_wide(const Params &p, const Partials &part, size_t x, size_t t, size_t h0,
                                  size_t group) {
    const float(*s_f)[kMaxSplits] = split_factors(p, part, x, h0, group);
    const unsigned nz = part.n_splits;
    constexpr int C4 = D / 4;
    for (size_t e = threadIdx.x; e < group * C4; e += blockDim.x) {
        const size_t g = e / C4, c4 = e % C4;
        const float4 *o = reinterpret_cast<const float4 *>(part.o + (x * p.heads + h0 + g) * nz * D) + c4;
        float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (unsigned z = 0; z < nz; z += 8) {
            float4 v[8];
#pragma unroll
            for (unsigned k = 0; k < 8; k++) v[k] = z + k < nz ? __ldcg(o + size_t(z + k) * C4) : acc;
#pragma unroll
            for (unsigned k = 0; k < 8; k++) {
                if (z + k < nz) {
                    const float f = s_f[g][z + k];
                    acc.x = fmaf(v[k].x, f, acc.x);
                    acc.y = fmaf(v[k].y, f, acc.y);
                    acc.z = fmaf(v[k].z, f, acc.z);
                    acc.w = fmaf(v[k].w, f, acc.w);
                }
            }
        }
        float *out = static_cast<float *>(p.out) + t * p.out_stride + (h0 + g) * D + 4 * c4;
        out[0] = acc.x;
        out[1] = acc.y;
        out[2] = acc.z;
        out[3] = acc.w;
    }
}

// G: query heads per kv head rounded up to 1, 2, 4, 6 or 8 (heads g >= group are zeros and
// never written).
template <class TK, int D, int G, class Source>
__global__ void __launch_bounds__(kWideWarps * 32, 1) decode_wide_kernel(Params p, Source src, Partials part) {
    constexpr int E = 8;        // elements of a 16-byte load
    constexpr int LK = D / E;   // lanes that read one key's row: 16 or 8
    constexpr int KPW = 32 / LK;  // keys of one warp-wide load: 2 or 4
    constexpr int U = kWideTileKeys / KPW;  // loads of K (and of V) a lane makes per tile
    static_assert(D % (E * 4) == 0 && 32 % LK == 0 && kWideTileKeys % KPW == 0, "tile shape");
    // The tiles' K/V chunks while the warps walk their keys ([warp][K, V][u][lane], 16 bytes each),
    // then the warps' outputs for their merge: one buffer (a barrier between the two uses).
    constexpr size_t kTileBytes = size_t(kWideWarps) * 2 * U * 32 * sizeof(uint4);
    constexpr size_t kOutBytes = size_t(kWideWarps) * G * D * sizeof(float);
    __shared__ __align__(16) unsigned char s_buf[kTileBytes > kOutBytes ? kTileBytes : kOutBytes];
    __shared__ float s_m[kWideWarps][G], s_l[kWideWarps][G];
    auto s_kv = reinterpret_cast<uint4(*)[2][U][32]>(s_buf);
    auto s_o = reinterpret_cast<float(*)[G][D]>(s_buf);

    const size_t x = blockIdx.x, kh = blockIdx.y, z = blockIdx.z;
    size_t s = 0;
    const size_t t = decode_token(p, src, x, &s);
    if (t == SIZE_MAX) return;
    const size_t group = p.heads / p.kv_heads;
    const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned sub = lane / LK, el = lane % LK;  // the key of a load this lane reads, its 8 elements

    const size_t nv = src.n_visible(s, t), first = min(src.first_visible(s, t), nv);
    const size_t span = nv - first, chunk = (span + part.n_splits - 1) / part.n_splits;
    const size_t j0 = first + min(span, z * chunk), j1 = first + min(span, (z + 1) * chunk);

    // q (scaled) in shared memory, read back as float4 for each key: held in registers it took
    // G x 8 of them (255 at G = 8), and ptxas then split the tile's K loads around the first
    // products
    __shared__ __align__(16) float s_q[G][D];
    for (size_t e = threadIdx.x; e < size_t(G) * D; e += blockDim.x) {
        const size_t g = e / D, c = e % D;
        s_q[g][c] = g < group ? static_cast<const float *>(p.q)[t * p.q_stride + (kh * group + g) * D + c] * p.scale
                              : 0.0f;
    }
    float o[G][E], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < E; i++) o[g][i] = 0.0f;
    }
    __syncthreads();
    const TK *kc = static_cast<const TK *>(p.k_cache) + kh * D + el * E;
    const TK *vc = static_cast<const TK *>(p.v_cache) + kh * D + el * E;
    const size_t slot_elems = p.kv_heads * D;

    // Lane L < kWideTileKeys holds the slot of key L of the warp's current tile (clamped to the
    // split's last key: every load stays in the cache, and keys past j1 weigh 0), and loads the
    // next tile's while this one's K/V are in flight.
    constexpr size_t kStride = size_t(kWideWarps) * kWideTileKeys;
    auto slot_at = [&](size_t b) -> unsigned long long {
        return j1 > b ? (unsigned long long)src.slot(s, min(b + lane % kWideTileKeys, j1 - 1)) : 0ull;
    };
    size_t base = j0 + size_t(warp) * kWideTileKeys;
    unsigned long long my_slot = slot_at(base);
    for (; base < j1; base += kStride) {
        const unsigned long long next_slot = slot_at(base + kStride);
        // 1. the tile's K and V rows: each lane's 2U 16-byte chunks copied to shared memory
        //    asynchronously, all in flight before the one wait (loaded into registers, ptxas put
        //    the V loads after the first products, which wait for K: two waits on memory a tile)
        bool ok[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int k = u * KPW + int(sub);
            ok[u] = base + size_t(k) < j1;
            const size_t off = size_t(__shfl_sync(kFullMask, my_slot, k)) * slot_elems;
            cp_async16(&s_kv[warp][0][u][lane], kc + off);
            cp_async16(&s_kv[warp][1][u][lane], vc + off);
        }
        cp_async_wait_all();  // a lane reads back only the chunks it copied itself
        uint4 kr[U];
        float vx[U][E];
#pragma unroll
        for (int u = 0; u < U; u++) {
            kr[u] = s_kv[warp][0][u][lane];
            unpack8<TK>(s_kv[warp][1][u][lane], vx[u]);
        }
        // 2. scores: this lane's 8 products, summed over the key's LK lanes (a butterfly: every
        //    lane of the key ends with the same bits, as each step adds the same pair)
        float sc[U][G];
#pragma unroll
        for (int u = 0; u < U; u++) {
            float kx[E];
            unpack8<TK>(kr[u], kx);
#pragma unroll
            for (int g = 0; g < G; g++) {
                const float4 qa = *reinterpret_cast<const float4 *>(&s_q[g][el * E]);
                const float4 qb = *reinterpret_cast<const float4 *>(&s_q[g][el * E + 4]);
                float a = qa.x * kx[0];
                a = fmaf(qa.y, kx[1], a);
                a = fmaf(qa.z, kx[2], a);
                a = fmaf(qa.w, kx[3], a);
                a = fmaf(qb.x, kx[4], a);
                a = fmaf(qb.y, kx[5], a);
                a = fmaf(qb.z, kx[6], a);
                a = fmaf(qb.w, kx[7], a);
                sc[u][g] = a;
            }
        }
#pragma unroll
        for (int off = LK / 2; off >= 1; off /= 2) {
#pragma unroll
            for (int u = 0; u < U; u++) {
#pragma unroll
                for (int g = 0; g < G; g++) sc[u][g] += __shfl_xor_sync(kFullMask, sc[u][g], off);
            }
        }
        // 3. per head: the tile's max over the warp (finite: key `base` is below j1), one rescale
        //    of the running state, the weighted V rows
#pragma unroll
        for (int g = 0; g < G; g++) {
            float tm = -INFINITY;
#pragma unroll
            for (int u = 0; u < U; u++) tm = ok[u] ? fmaxf(tm, sc[u][g]) : tm;
#pragma unroll
            for (int off = LK; off < 32; off *= 2) tm = fmaxf(tm, __shfl_xor_sync(kFullMask, tm, off));
            const float mn = fmaxf(m[g], tm);
            const float c = expf(m[g] - mn);  // 0 while m[g] is -inf (l and o are 0)
            float pw[U], ps = 0.0f;
#pragma unroll
            for (int u = 0; u < U; u++) {
                pw[u] = ok[u] ? expf(sc[u][g] - mn) : 0.0f;
                ps += pw[u];
            }
            l[g] = l[g] * c + ps;
#pragma unroll
            for (int i = 0; i < E; i++) {
                float a = o[g][i] * c;
#pragma unroll
                for (int u = 0; u < U; u++) a = fmaf(pw[u], vx[u][i], a);
                o[g][i] = a;
            }
            m[g] = mn;
        }
        my_slot = next_slot;
    }
    __syncthreads();  // every warp is done with its tiles before s_buf holds the outputs
    // 4. the warp's key groups (lanes el, el + LK, ...) share m: their l and o add up
#pragma unroll
    for (int off = LK; off < 32; off *= 2) {
#pragma unroll
        for (int g = 0; g < G; g++) {
            l[g] += __shfl_xor_sync(kFullMask, l[g], off);
#pragma unroll
            for (int i = 0; i < E; i++) o[g][i] += __shfl_xor_sync(kFullMask, o[g][i], off);
        }
    }
    if (lane < unsigned(LK)) {
#pragma unroll
        for (int g = 0; g < G; g++) {
#pragma unroll
            for (int i = 0; i < E; i++) s_o[warp][g][el * E + i] = o[g][i];
            if (lane == 0) s_m[warp][g] = m[g], s_l[warp][g] = l[g];
        }
    }
    __syncthreads();
    // 5. the warps merged, then the output or this split's state and the ticket (decode_kernel's end)
    if (!finish_decode_block<float, kWideWarps>(
            p, part, x, kh, z, t, group, D, [&](unsigned w, size_t g) { return s_m[w][g]; },
            [&](unsigned w, size_t g) { return s_l[w][g]; }, [&](unsigned w, size_t g, size_t c) { return s_o[w][g][c]; })) {
        return;
    }
    merge_splits_wide<D>(p, part, x, t, kh * group, group);
    if (threadIdx.x == 0) part.done[x * p.kv_heads + kh] = 0;
}

// The kernel's G for a group size.
inline int wide_group_bucket(size_t group) { return group <= 2 ? int(group) : group <= 4 ? 4 : group <= 6 ? 6 : 8; }

// launch_decode for the shapes wide_decode_serves: `scratch` holds decode_partial_floats(...)
// floats, 16-byte aligned (the partial sums first, then the (max, denominator) pairs).
template <class Source>
void launch_wide_decode(const Params &base, const Source &src, llaisysDataType_t kvdt, size_t n_seqs,
                        size_t tiles_per_row, size_t min_q_len, size_t max_q_len, size_t n_splits, float *scratch,
                        unsigned *done, cudaStream_t stream) {
    if (n_seqs == 0 || tiles_per_row == 0) return;
    const Params p = decode_params(base, n_seqs, tiles_per_row, min_q_len, max_q_len, n_splits);
    const size_t blocks = n_seqs * tiles_per_row;
    Partials part{nullptr, nullptr, done, unsigned(n_splits)};
    if (n_splits > 1) {
        part.o = scratch;
        part.ml = reinterpret_cast<float2 *>(scratch + blocks * p.heads * n_splits * p.dv);
    }
    const dim3 grid(unsigned(blocks), unsigned(p.kv_heads), unsigned(n_splits));
    const int g = wide_group_bucket(p.heads / p.kv_heads);
    auto go = [&](auto ktag, auto dtag) {
        using TK = decltype(ktag);
        constexpr int D = decltype(dtag)::value;
        switch (g) {
        case 1: decode_wide_kernel<TK, D, 1, Source><<<grid, kWideWarps * 32, 0, stream>>>(p, src, part); break;
        case 2: decode_wide_kernel<TK, D, 2, Source><<<grid, kWideWarps * 32, 0, stream>>>(p, src, part); break;
        case 4: decode_wide_kernel<TK, D, 4, Source><<<grid, kWideWarps * 32, 0, stream>>>(p, src, part); break;
        case 6: decode_wide_kernel<TK, D, 6, Source><<<grid, kWideWarps * 32, 0, stream>>>(p, src, part); break;
        default: decode_wide_kernel<TK, D, 8, Source><<<grid, kWideWarps * 32, 0, stream>>>(p, src, part); break;
        }
    };
    auto by_d = [&](auto ktag) {
        if (p.d == 64) go(ktag, std::integral_constant<int, 64>{});
        else go(ktag, std::integral_constant<int, 128>{});
    };
    if (kvdt == LLAISYS_DTYPE_F16) by_d(fp16_t{});
    else by_d(bf16_t{});
    LLAISYS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace llaisys::ops::nvidia::attention

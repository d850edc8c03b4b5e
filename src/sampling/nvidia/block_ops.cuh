// Block-wide building blocks of the GPU sampler (one block of kThreads threads per row):
// reductions, stable compaction, a bitonic sort, radix selects and the ordered walk that
// mirrors the CPU's running sums. Every function here is called by all threads of the block
// (they contain __syncthreads) with block-uniform arguments.
#pragma once

#include <cstdint>

namespace llaisys::sampling::nvidia {

constexpr int kThreads = 512;          // threads per row; a power of two (tree reductions)
constexpr uint32_t kSortShared = 2048;  // candidates sorted in shared memory up to this many
constexpr uint32_t kExact = 4096;       // running sums up to this long are added by one thread,
                                        // in the CPU's order and so to the same bits

struct Shared {
    uint32_t sort_keys[kSortShared];  // candidates being sorted, when they fit
    int32_t sort_ids[kSortShared];
    double dbuf[kThreads];            // per-thread double partials, then their exclusive scan
    float fbuf[kThreads];             // per-thread float partials (max) / argmax values
    uint32_t ubuf[kThreads];          // per-thread counts / argmax indices
    int32_t ibuf[kThreads];           // per-thread int partials (max)
    uint32_t hist[256];               // radix select: counts per digit
    double mhist[256];                // radix select: probability mass per digit
    double dcast[2];                  // values broadcast by thread 0
    uint32_t ucast[3];
    int32_t icast;
};

// Order-preserving map of a float to uint32 (larger float, larger key). -0 maps to +0's key:
// the CPU's float comparisons treat them as equal, so they must tie here too. Every NaN maps
// to the largest key, above +inf: the argmax rule's order (NaN first, ties by id), which
// top_logprobs follows; float_of gives a NaN back. (Rows steps 4-9 see have no NaN.)
__device__ __forceinline__ uint32_t key_of(float f) {
    uint32_t b = __float_as_uint(f);
    if (isnan(f)) return 0xffffffffu;
    if ((b & 0x7fffffffu) == 0) b = 0;
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float float_of(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// a comes before b in the CPU's by_logit order: larger logit first, ties by smaller id.
__device__ __forceinline__ bool before(uint32_t ka, int32_t ia, uint32_t kb, int32_t ib) {
    return ka > kb || (ka == kb && ia < ib);
}

struct Range {
    uint32_t begin, end;
};

// Thread t's contiguous slice [t * chunk, (t + 1) * chunk) of [0, n), clipped to n.
__device__ __forceinline__ Range my_chunk(uint32_t n, uint32_t chunk) {
    uint64_t b = uint64_t(threadIdx.x) * chunk;
    if (b > n) b = n;
    uint64_t e = b + chunk;
    if (e > n) e = n;
    return Range{uint32_t(b), uint32_t(e)};
}

template <class T, class Op>
__device__ T block_reduce(T v, T *buf, Op op) {
    const int t = int(threadIdx.x);
    buf[t] = v;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (t < s) buf[t] = op(buf[t], buf[t + s]);
        __syncthreads();
    }
    T r = buf[0];
    __syncthreads();  // buf is reused by the next reduction
    return r;
}

// Passes over a row read kUnroll elements per thread before using any: a loop that loads,
// then compares, waits a memory round trip per element (one block walked a 151,936-wide row
// at 127 us for a greedy argmax on an H200, from the step's own fresh logits in L2).
constexpr uint32_t kUnroll = 8;

// f(w[i], i) for every i in [0, n) this thread owns (i = threadIdx.x + j * kThreads), in
// ascending i, with kUnroll loads in flight.
template <class F>
__device__ __forceinline__ void for_each_strided(const float *w, uint32_t n, F f) {
    uint32_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * kThreads < n; i += kUnroll * kThreads) {
        float v[kUnroll];
#pragma unroll
        for (uint32_t u = 0; u < kUnroll; u++) v[u] = w[i + u * kThreads];
#pragma unroll
        for (uint32_t u = 0; u < kUnroll; u++) f(v[u], i + u * kThreads);
    }
    for (; i < n; i += kThreads) f(w[i], i);
}

// max of w[0, n); NaNs are ignored (fmaxf).
__device__ float block_max(const float *w, uint32_t n, Shared &sh) {
    float m = -INFINITY;
    for_each_strided(w, n, [&](float v, uint32_t) { m = fmaxf(m, v); });
    return block_reduce(m, sh.fbuf, [](float a, float b) { return fmaxf(a, b); });
}

// Whether (bv, bi) should replace (av, ai) in the argmax rule: NaN beats every number,
// equal values (or two NaNs) go to the smaller index. Associative, so any reduction order
// gives the CPU's first_argmax: the first NaN if there is one, else the first maximum.
__device__ __forceinline__ bool argmax_better(float bv, uint32_t bi, float av, uint32_t ai) {
    const bool bn = isnan(bv), an = isnan(av);
    if (bn != an) return bn;
    if (bn || bv == av) return bi < ai;
    return bv > av;
}

// The CPU's first_argmax over w[0, n), n >= 1 (the index of the first NaN, else of the first
// maximum). Block-uniform result.
__device__ uint32_t block_argmax(const float *w, uint32_t n, Shared &sh) {
    float bv = -INFINITY;
    uint32_t bi = UINT32_MAX;  // loses every tie: a real index replaces it
    for_each_strided(w, n, [&](float v, uint32_t i) {
        if (argmax_better(v, i, bv, bi)) {
            bv = v;
            bi = i;
        }
    });
    const int t = int(threadIdx.x);
    sh.fbuf[t] = bv;
    sh.ubuf[t] = bi;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
        if (t < s && argmax_better(sh.fbuf[t + s], sh.ubuf[t + s], sh.fbuf[t], sh.ubuf[t])) {
            sh.fbuf[t] = sh.fbuf[t + s];
            sh.ubuf[t] = sh.ubuf[t + s];
        }
        __syncthreads();
    }
    uint32_t r = sh.ubuf[0];  // < n: n >= 1, and any real element beats the sentinel
    __syncthreads();
    return r;
}

// Number of i in [0, n) with pred(i).
template <class Pred>
__device__ uint32_t block_count(uint32_t n, Pred pred, Shared &sh) {
    uint32_t c = 0;
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) c += pred(i) ? 1u : 0u;
    return block_reduce(c, sh.ubuf, [](uint32_t a, uint32_t b) { return a + b; });
}

// The largest i in [0, n) with p(i) > 0, or 0 when there is none (the CPU's last_nonzero).
template <class P>
__device__ uint32_t last_positive(uint32_t n, P p, Shared &sh) {
    int32_t best = -1;
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
        if (p(i) > 0.0f) best = max(best, int32_t(i));
    }
    best = block_reduce(best, sh.ibuf, [](int32_t a, int32_t b) { return max(a, b); });
    return best < 0 ? 0u : uint32_t(best);
}

// Writes (key_at(i), i) for every i in [0, n) with pred(i), in increasing i, into
// keys/ids [0, cap); returns how many matched (counting those past cap). Stable: thread t
// handles a contiguous slice and starts writing at the count of the slices before it.
template <class Pred, class KeyAt>
__device__ uint32_t compact(uint32_t n, Pred pred, KeyAt key_at, uint32_t *keys, int32_t *ids, uint32_t cap,
                            Shared &sh) {
    const Range r = my_chunk(n, (n + kThreads - 1) / kThreads);
    uint32_t count = 0;
    for (uint32_t i = r.begin; i < r.end; i++) count += pred(i) ? 1u : 0u;
    sh.ubuf[threadIdx.x] = count;
    __syncthreads();
    if (threadIdx.x == 0) {
        uint32_t acc = 0;  // <= n < 2^31
        for (int t = 0; t < kThreads; t++) {
            uint32_t c = sh.ubuf[t];
            sh.ubuf[t] = acc;
            acc += c;
        }
        sh.ucast[0] = acc;
    }
    __syncthreads();
    uint32_t pos = sh.ubuf[threadIdx.x];
    for (uint32_t i = r.begin; i < r.end && pos < cap; i++) {
        if (pred(i)) {
            keys[pos] = key_at(i);
            ids[pos] = int32_t(i);
            pos++;
        }
    }
    const uint32_t total = sh.ucast[0];
    __syncthreads();  // the writes are visible to the whole block from here on
    return total;
}

__device__ __forceinline__ void compare_swap(uint32_t *keys, int32_t *ids, uint32_t lo, uint32_t hi) {
    uint32_t kl = keys[lo], kh = keys[hi];
    int32_t il = ids[lo], ih = ids[hi];
    if (before(kh, ih, kl, il)) {
        keys[lo] = kh;
        keys[hi] = kl;
        ids[lo] = ih;
        ids[hi] = il;
    }
}

// Sorts keys/ids [0, n) into `before` order. A bitonic network in the form where every
// comparator puts the earlier element at its lower index (each merge starts with a "flip"
// lo = base + off against hi = base + size - 1 - off, then half-cleaners). Positions past n
// stand for padding that sorts last: a comparator (lo, hi >= n) would never swap, so it is
// skipped, the padding never moves and nothing needs storing. O(n log^2 n) work.
__device__ void bitonic_sort(uint32_t *keys, int32_t *ids, uint32_t n) {
    uint32_t pow2 = 1;
    while (pow2 < n) pow2 <<= 1;  // n < 2^31
    const uint32_t pairs = pow2 / 2;
    for (uint32_t size = 2; size <= pow2; size <<= 1) {
        const uint32_t half = size / 2;
        for (uint32_t p = threadIdx.x; p < pairs; p += kThreads) {
            uint32_t base = (p / half) * size, off = p % half;
            uint32_t lo = base + off, hi = base + size - 1 - off;
            if (hi < n) compare_swap(keys, ids, lo, hi);
        }
        __syncthreads();
        for (uint32_t stride = half / 2; stride > 0; stride >>= 1) {
            for (uint32_t p = threadIdx.x; p < pairs; p += kThreads) {
                uint32_t lo = (p / stride) * 2 * stride + p % stride, hi = lo + stride;
                if (hi < n) compare_swap(keys, ids, lo, hi);
            }
            __syncthreads();
        }
    }
}

// Sorts candidates [0, n) of global scratch, through shared memory when they fit.
__device__ void sort_candidates(uint32_t *keys, int32_t *ids, uint32_t n, Shared &sh) {
    if (n > kSortShared) {
        bitonic_sort(keys, ids, n);
        return;
    }
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
        sh.sort_keys[i] = keys[i];
        sh.sort_ids[i] = ids[i];
    }
    __syncthreads();
    bitonic_sort(sh.sort_keys, sh.sort_ids, n);
    for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
        keys[i] = sh.sort_keys[i];
        ids[i] = sh.sort_ids[i];
    }
    __syncthreads();
}

// The k-th largest of key_at(i) over i in [0, n), 1 <= k <= n (MSB-first radix select, 8
// bits a pass). *rank gets its rank among the keys equal to it: exactly k - rank keys are
// larger.
template <class KeyAt>
__device__ uint32_t select_kth(uint32_t n, uint32_t k, KeyAt key_at, Shared &sh, uint32_t *rank) {
    uint32_t prefix = 0, mask = 0, rem = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int j = int(threadIdx.x); j < 256; j += kThreads) sh.hist[j] = 0;
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
            uint32_t key = key_at(i);
            if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            uint32_t d = 255;
            for (; d > 0; d--) {  // digit 0 takes what is left: the counts add up to >= rem
                if (sh.hist[d] >= rem) break;
                rem -= sh.hist[d];
            }
            sh.ucast[1] = d;
            sh.ucast[2] = rem;
        }
        __syncthreads();
        prefix |= sh.ucast[1] << shift;
        mask |= 255u << shift;
        rem = sh.ucast[2];
        __syncthreads();  // hist and ucast are rewritten by the next pass
    }
    *rank = rem;
    return prefix;
}

// A key theta such that the elements of w [0, n) with floor <= key and theta <= key carry
// probability mass >= target, as large as the radix passes can make it (MSB first, mass per
// digit in double atomics). `prob` may be approximate; the caller asks for a margin. When
// rounding leaves no digit of a pass reaching target, theta keeps the digits decided so
// far (zeros below): a superset. 0 when even the total falls short.
template <class Prob>
__device__ uint32_t select_mass(const float *w, uint32_t n, uint32_t floor, Prob prob, double target, Shared &sh) {
    uint32_t prefix = 0, mask = 0;
    double above = 0.0;  // mass of the keys above the prefix decided so far
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int j = int(threadIdx.x); j < 256; j += kThreads) sh.mhist[j] = 0.0;
        __syncthreads();
        for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
            float f = w[i];
            uint32_t key = key_of(f);
            if (key >= floor && (key & mask) == prefix) atomicAdd(&sh.mhist[(key >> shift) & 255u], double(prob(f)));
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int d = 255;
            for (; d >= 0; d--) {
                if (above + sh.mhist[d] >= target) break;
                above += sh.mhist[d];
            }
            sh.icast = d;
            sh.dcast[0] = above;
        }
        __syncthreads();
        const int d = sh.icast;
        above = sh.dcast[0];
        __syncthreads();
        if (d < 0) break;  // block-uniform
        prefix |= uint32_t(d) << shift;
        mask |= 255u << shift;
    }
    return prefix;
}

struct Crossing {
    uint32_t index;  // the first index whose running sum crosses x; n when none does
    double total;    // the sum of all n terms
};

// Walks p(0) .. p(n-1) with a running double sum and finds the first index where it crosses
// x: acc > x when strict (the draw: u < acc), acc >= x otherwise (top-p: mass >= target).
// With scale_by_total, x is first multiplied by the total (u * kept_total, top_p * total).
// Up to kExact terms, one thread adds them in order from 0.0: the CPU's sums, bit for bit.
// Longer walks give each thread a contiguous chunk, add the chunk sums in order (thread 0)
// and let the chunk where the crossing lies walk it again from its prefix; the sums then
// associate differently from the CPU's in the last bits. If that rounding leaves the
// crossing inside the chunk unreached, its last index with p > 0 is taken.
template <class P>
__device__ Crossing first_crossing(uint32_t n, P p, double x, bool scale_by_total, bool strict, Shared &sh) {
    const uint32_t chunk = n <= kExact ? n : (n + kThreads - 1) / kThreads;
    const Range r = my_chunk(n, chunk);
    double part = 0.0;
    for (uint32_t i = r.begin; i < r.end; i++) part += double(p(i));
    sh.dbuf[threadIdx.x] = part;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int t = 0; t < kThreads; t++) total += sh.dbuf[t];
        const double xx = scale_by_total ? x * total : x;
        double acc = 0.0;
        int hit = -1;
        for (int t = 0; t < kThreads; t++) {  // same order as `total`
            double c = sh.dbuf[t];
            sh.dbuf[t] = acc;
            acc += c;
            if (hit < 0 && (strict ? xx < acc : acc >= xx)) hit = t;
        }
        sh.dcast[0] = total;
        sh.dcast[1] = xx;
        sh.icast = hit;
        sh.ucast[0] = n;
    }
    __syncthreads();
    if (int(threadIdx.x) == sh.icast) {
        const double xx = sh.dcast[1];
        double acc = sh.dbuf[threadIdx.x];
        uint32_t found = UINT32_MAX, last = UINT32_MAX;
        for (uint32_t i = r.begin; i < r.end; i++) {
            float v = p(i);
            if (v > 0.0f) last = i;
            acc += double(v);
            if (strict ? xx < acc : acc >= xx) {
                found = i;
                break;
            }
        }
        if (found == UINT32_MAX) found = last != UINT32_MAX ? last : (r.end > r.begin ? r.end - 1 : r.begin);
        sh.ucast[0] = found;
    }
    __syncthreads();
    const Crossing c{sh.ucast[0], sh.dcast[0]};
    __syncthreads();
    return c;
}

}  // namespace llaisys::sampling::nvidia

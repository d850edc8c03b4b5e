// The quantized linear's float path on AMX tiles (quant_gemm.hpp): weight rows dequantized to
// bf16, activations rounded to bf16, products summed in f32 by TDPBF16PS. Built with the AMX and
// AVX512_BF16 flags (CMakeLists.txt); called only where cpu_uses_amx().
//
// As in quant_gemm.cpp the GEMM runs transposed, out^T [n, m] = W [n, k] @ x^T:
//   A tiles: 16 weight rows x 32 k of W in bf16, from wb [k / 32][kRowsW][32], the rows of a
//            group dequantized over all of k (quant_dequant.inc's blocks, Bf16Sink), so that
//            the two A tiles of a k-step are 2 KiB in a row;
//   B tiles: 16 pairs of k x 16 activation rows x 2, the "VNNI" layout TDPBF16PS reads,
//            packed once per call: xb [n_panels][k / 2][16][2], zero past row m;
//   C tiles: 16 weight rows x 16 activation rows of f32 sums, held in tile registers over all
//            of k: tmm0..3 C, tmm4..5 A, tmm6..7 B.
// A work item is a group of kRowsW = 32 weight rows of one segment (two A tiles) and up to
// kRowsMax activation rows, run two panels at a time. Up to 32 activation rows (decode batches)
// the dequantization is the cost, and each thread pipelines its items (Pipeline); from 33 rows
// (prefill) a group is dequantized once and run over every panel pair.
// Rounding both operands to bf16 moves each product by at most ~2^-8 of |x||w| (the bound the
// tests hold it to); everything is summed in f32.

// GCC 12 reports the _mm512_undefined source operand of the masked builtins behind the
// unpack, shuffle and convert intrinsics as (maybe-)uninitialized (as in gemm_avx512bf16.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "quant_gemm.hpp"

#include "../../../utils/checked.hpp"
#include "../../../utils/cpu_isa.hpp"
#include "../../../utils/types.hpp"
#include "quant_kernels.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#define LLAISYS_QUANT_NS quant_amx
#define LLAISYS_QUANT_BLOCKS_ONLY
#include "quant_dequant.inc"

namespace llaisys::ops::cpu::amx {
namespace {

using quant_amx::dequant_block;
using quant_amx::prefetch_lines;

constexpr size_t kRowsW = 32;     // weight rows per item: two A tiles
constexpr size_t kChunk = kRowsW * 32;  // elements of wb a k-step of 32 holds
constexpr size_t kPanel = 16;     // activation rows per B tile
constexpr size_t kRowsMax = 256;  // activation rows per item

// The palette-1 tile configuration (Intel SDM, LDTILECFG): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
    uint8_t palette = 1, start_row = 0, reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

void load_tile_config() {
    TileConfig cfg;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    _tile_loadconfig(&cfg);
}

// The 16 rows r[0..15] of a 16 x 16 matrix of 32-bit elements, transposed in place.
inline void transpose16(__m512i *r) {
    __m512i t[16];
    for (int i = 0; i < 8; i++) {  // per 128-bit lane l: rows 2i, 2i+1 of columns 4l .. 4l + 3
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {  // lane l of r[4i + c]: rows 4i .. 4i + 3 of column 4l + c
        r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    __m512i o[16];
    for (int c = 0; c < 4; c++) {  // column 4l + c gathers lane l of r[c], r[4 + c], r[8 + c], r[12 + c]
        const __m512i ab_lo = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x44), ab_hi = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xEE);
        const __m512i ef_lo = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x44);
        const __m512i ef_hi = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xEE);
        o[c] = _mm512_shuffle_i32x4(ab_lo, ef_lo, 0x88);
        o[4 + c] = _mm512_shuffle_i32x4(ab_lo, ef_lo, 0xDD);
        o[8 + c] = _mm512_shuffle_i32x4(ab_hi, ef_hi, 0x88);
        o[12 + c] = _mm512_shuffle_i32x4(ab_hi, ef_hi, 0xDD);
    }
    for (int i = 0; i < 16; i++) r[i] = o[i];
}

// 32 f32 as 32 bf16 (round to nearest even), as 16 dwords: dword j holds elements 2j, 2j + 1.
inline __m512i bf16_pairs(const float *p) {
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(p + 16), _mm512_loadu_ps(p));
}

// xb [n_p][k / 2][16][2] bf16 from x [m, k] f32 (layout at the top), n_p = ceil(m / 16) rounded
// up to even, zero past row m; parallel over panels.
void pack_x(uint16_t *xb, const float *x, size_t m, size_t k, size_t n_p) {
#pragma omp parallel for schedule(static) if (m * k >= 65536)
    for (ptrdiff_t pp = 0; pp < ptrdiff_t(n_p); pp++) {
        const size_t p = size_t(pp), r0 = p * kPanel, rows = r0 < m ? std::min(kPanel, m - r0) : 0;
        uint16_t *dst = xb + p * (k / 2) * kPanel * 2;  // [k / 2][16][2]
        for (size_t k0 = 0; k0 < k; k0 += 32) {
            __m512i r[16];  // row c: its 16 pairs of k0 .. k0 + 31
            for (size_t c = 0; c < kPanel; c++)
                r[c] = c < rows ? bf16_pairs(x + (r0 + c) * k + k0) : _mm512_setzero_si512();
            transpose16(r);  // r[j]: pair j of the 16 rows
            for (size_t j = 0; j < 16; j++) _mm512_storeu_si512(dst + (k0 / 2 + j) * kPanel * 2, r[j]);
        }
    }
}

// Stores a block's values (quant_dequant.inc) as bf16 in wb's layout: its run of 32 starting at
// element e at dst + e / 32 * kChunk.
struct Bf16Sink {
    uint16_t *dst;
    template <int kLevels>
    inline void put(size_t e, __m256i q, float s0, float s1, float mn0, float mn1) {
        uint16_t *o = dst + e / 32 * kChunk;
        if constexpr (kLevels == 4) {  // Q2_K: words v and 4 + v are bf16(s0 v - mn0), bf16(s1 v - mn1)
            const __m512 v = _mm512_setr_ps(0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 0, 0, 0, 0, 0, 0);
            const __m512 s = _mm512_setr_ps(s0, s0, s0, s0, s1, s1, s1, s1, 0, 0, 0, 0, 0, 0, 0, 0);
            const __m512 m = _mm512_setr_ps(mn0, mn0, mn0, mn0, mn1, mn1, mn1, mn1, 0, 0, 0, 0, 0, 0, 0, 0);
            const __m512i lut = _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(_mm512_fmsub_ps(v, s, m)));
            const __m512i idx = _mm512_add_epi16(_mm512_cvtepu8_epi16(q),  // elements 16 .. 31: words 4 ..
                                                 _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1));
            _mm512_storeu_si512(o, _mm512_permutexvar_epi16(idx, lut));
        } else if constexpr (kLevels > 0) {  // Q4_K, Q5_K, Q4_1, Q5_1: the values s0 v - mn made once, q looked up
            const float mn = mn0;
            (void)s1, (void)mn1;
            const __m512 v0 = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            const __m512 lo = _mm512_fmsub_ps(v0, _mm512_set1_ps(s0), _mm512_set1_ps(mn));
            __m512i lut;  // word v: bf16(s0 v - mn), the bits converting each value gives
            if constexpr (kLevels == 16) {
                lut = _mm512_castsi256_si512((__m256i)_mm512_cvtneps_pbh(lo));
            } else {
                static_assert(kLevels == 32);
                const __m512 hi = _mm512_fmsub_ps(_mm512_add_ps(v0, _mm512_set1_ps(16.0f)), _mm512_set1_ps(s0),
                                                  _mm512_set1_ps(mn));
                lut = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            }
            _mm512_storeu_si512(o, _mm512_permutexvar_epi16(_mm512_cvtepu8_epi16(q), lut));
        } else {
            (void)mn0, (void)mn1;
            __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
            __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
            _mm512_storeu_si512(o, (__m512i)_mm512_cvtne2ps_pbh(_mm512_mul_ps(hi, _mm512_set1_ps(s1)),
                                                                _mm512_mul_ps(lo, _mm512_set1_ps(s0))));
        }
    }
};

// One weight row of nb blocks into its place in wb (dst = wb + r * 32: row r of every chunk).
template <class B>
void dequant_row_bf16(uint16_t *dst, const std::byte *row, size_t nb) {
    constexpr size_t bs = quant::block_elems<B>();
    // one T0 pass pf ahead (the int8 walks' two passes, quant_dot.inc, made batch-16 here
    // slower: 1.5B Q4_K_M 90.8-91.2 against 92.0-96.6 tok/s, alternating processes)
    static const size_t pf = quant_prefetch_bytes();
    const B *blk = reinterpret_cast<const B *>(row);  // [nb]
    for (size_t b = 0; b < nb; b++) {
        // every line of the block pf bytes ahead (past the row: the next one)
        if (pf) prefetch_lines<_MM_HINT_T0>(reinterpret_cast<const char *>(blk + b) + pf, sizeof(B));
        Bf16Sink sink{dst + b * bs / 32 * kChunk};
        dequant_block(blk[b], sink);
    }
}

void dequant_row(llaisysDataType_t dt, uint16_t *dst, const std::byte *row, size_t nb) {
    switch (dt) {
    case LLAISYS_DTYPE_Q4_0: return dequant_row_bf16<quant::BlockQ4_0>(dst, row, nb);
    case LLAISYS_DTYPE_Q4_1: return dequant_row_bf16<quant::BlockQ4_1>(dst, row, nb);
    case LLAISYS_DTYPE_Q5_0: return dequant_row_bf16<quant::BlockQ5_0>(dst, row, nb);
    case LLAISYS_DTYPE_Q5_1: return dequant_row_bf16<quant::BlockQ5_1>(dst, row, nb);
    case LLAISYS_DTYPE_Q8_0: return dequant_row_bf16<quant::BlockQ8_0>(dst, row, nb);
    case LLAISYS_DTYPE_Q2_K: return dequant_row_bf16<quant::BlockQ2_K>(dst, row, nb);
    case LLAISYS_DTYPE_Q3_K: return dequant_row_bf16<quant::BlockQ3_K>(dst, row, nb);
    case LLAISYS_DTYPE_Q4_K: return dequant_row_bf16<quant::BlockQ4_K>(dst, row, nb);
    case LLAISYS_DTYPE_Q5_K: return dequant_row_bf16<quant::BlockQ5_K>(dst, row, nb);
    case LLAISYS_DTYPE_Q6_K: return dequant_row_bf16<quant::BlockQ6_K>(dst, row, nb);
    case LLAISYS_DTYPE_IQ4_XS: return dequant_row_bf16<quant::BlockIQ4_XS>(dst, row, nb);
    case LLAISYS_DTYPE_IQ2_XXS: return dequant_row_bf16<quant::BlockIQ2_XXS>(dst, row, nb);
    case LLAISYS_DTYPE_IQ2_XS: return dequant_row_bf16<quant::BlockIQ2_XS>(dst, row, nb);
    case LLAISYS_DTYPE_IQ2_S: return dequant_row_bf16<quant::BlockIQ2_S>(dst, row, nb);
    case LLAISYS_DTYPE_IQ3_XXS: return dequant_row_bf16<quant::BlockIQ3_XXS>(dst, row, nb);
    case LLAISYS_DTYPE_IQ3_S: return dequant_row_bf16<quant::BlockIQ3_S>(dst, row, nb);
    case LLAISYS_DTYPE_IQ1_S: return dequant_row_bf16<quant::BlockIQ1_S>(dst, row, nb);
    case LLAISYS_DTYPE_IQ1_M: return dequant_row_bf16<quant::BlockIQ1_M>(dst, row, nb);
    default: return;  // quant_weight.cpp only stores the block formats of quant_plan's table
    }
}

// The tile products of one k-step of 32: A0, A1 (weight rows 0..15, 16..31: one chunk of wb at
// a) against the B tile at b (panel p) and, when Two, at b + pstride (panel p + 1).
template <bool Two>
inline void tile_step(const uint16_t *a, const uint16_t *b, size_t pstride) {
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a + 16 * 32, 64);
    _tile_loadd(6, b, 64);  // 16 pairs of k: [16][16][2]
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 5, 6);
    if constexpr (Two) {
        _tile_loadd(7, b + pstride, 64);
        _tile_dpbf16ps(2, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
    }
}

template <bool Two>
inline void zero_c() {
    _tile_zero(0);
    _tile_zero(1);
    if constexpr (Two) {
        _tile_zero(2);
        _tile_zero(3);
    }
}

// c [4][16][16]: c[0] weight rows 0..15 x panel p, c[1] rows 16..31 x p, c[2], c[3] for p + 1.
template <bool Two>
inline void store_c(float *c) {
    _tile_stored(0, c, 64);
    _tile_stored(1, c + 256, 64);
    if constexpr (Two) {
        _tile_stored(2, c + 512, 64);
        _tile_stored(3, c + 768, 64);
    }
}

// Panels p (and p + 1 when Two) of xb_p over wb (the group's rows dequantized over all of k),
// C held in tiles over all of k.
template <bool Two>
void run_panels(float *c, const uint16_t *wb, const uint16_t *xb_p, size_t k) {
    const size_t pstride = (k / 2) * kPanel * 2;
    zero_c<Two>();
    for (size_t k0 = 0; k0 < k; k0 += 32) tile_step<Two>(wb + k0 / 32 * kChunk, xb_p + k0 * kPanel, pstride);
    store_c<Two>(c);
}

// A work item's place: rows [r0, r0 + rows) of segment s, outputs j0 .., activation panels
// [p0, p1); and its bias.
struct Item {
    const QuantRows *s;
    size_t r0, rows, j0, p0, p1;
    float bias[kRowsW];
};

Item item_at(size_t t, const QuantRows *segs, size_t n_mb, size_t n_used, const std::byte *bias,
             llaisysDataType_t bias_dt) {
    size_t g = t / n_mb, si = 0;
    while (g >= ceil_div(segs[si].rows, kRowsW)) g -= ceil_div(segs[si++].rows, kRowsW);
    Item it{};
    it.s = &segs[si];
    it.r0 = g * kRowsW;
    it.rows = std::min(kRowsW, segs[si].rows - it.r0);
    it.j0 = segs[si].row0 + it.r0;
    it.p0 = t % n_mb * (kRowsMax / kPanel);
    it.p1 = std::min(n_used, it.p0 + kRowsMax / kPanel);
    if (bias) {
        dispatch_float(bias_dt, [&](auto tag) {
            const auto *bp = reinterpret_cast<const decltype(tag) *>(bias) + it.j0;  // [rows]
            for (size_t r = 0; r < it.rows; r++) it.bias[r] = to_f32(bp[r]);
        });
    }
    return it;
}

// out rows of panels p, p + 1 (two) from c (store_c's layout), plus the bias.
void write_out(float *out, size_t n, size_t m, const Item &it, size_t p, bool two, const float *c) {
    for (size_t q = 0; q < (two ? 2u : 1u); q++) {
        const size_t i0 = (p + q) * kPanel;
        for (size_t ci = 0; ci < kPanel && i0 + ci < m; ci++) {
            float *o = out + (i0 + ci) * n + it.j0;  // [rows] of output row i0 + ci
            for (size_t r = 0; r < it.rows; r++) o[r] = c[q * 512 + r * kPanel + ci] + it.bias[r];
        }
    }
}

// wb: rows [0, rows) of the item's weight dequantized over all of k (layout at the top), the
// rest of the 32 zero. With row_done, called after each row.
template <class F>
void dequant_item(uint16_t *wb, const Item &it, size_t k, F &&row_done) {
    const QuantRows &s = *it.s;
    if (it.rows < kRowsW) std::fill(wb, wb + kRowsW * k, uint16_t(0));
    const size_t nb = k / quant_block_size(s.dt);
    for (size_t r = 0; r < it.rows; r++) {
        dequant_row(s.dt, wb + r * 32, file_blocks(s, it.r0 + r, 0, nb, nullptr), nb);
        row_done(r);
    }
}

// Up to two activation panels (m <= 32), the items of one thread pipelined: the tile products of
// the last item run in slices between the rows of this one's dequantization, from the other of
// two buffers. A tile product waits on its loads and on the last product into its C tile; run
// back to back they left the vector units idle for a third of the time, which the
// dequantization's arithmetic now fills.
class Pipeline {
public:
    Pipeline(float *out, size_t n, size_t m, size_t k, const uint16_t *xb, uint16_t *wb2)
        : out_(out), n_(n), m_(m), k_(k), xb_(xb), wb_{wb2, wb2 + kRowsW * k} {}

    void add(const Item &it) {
        uint16_t *wb = wb_[cur_];
        const size_t steps = k_ / 32;
        dequant_item(wb, it, k_, [&](size_t r) {
            if (has_pending_) advance(std::min(steps, (r + 1) * steps / it.rows));
        });
        finish();
        pending_ = it;
        has_pending_ = true;
        done_ = 0;
        pending_wb_ = wb;
        cur_ ^= 1;
        if (it.p1 - it.p0 == 2) zero_c<true>();
        else zero_c<false>();
    }

    // The last item's products and outputs.
    void finish() {
        if (!has_pending_) return;
        advance(k_ / 32);
        alignas(64) float c[4 * 256];
        const bool two = pending_.p1 - pending_.p0 == 2;
        if (two) store_c<true>(c);
        else store_c<false>(c);
        write_out(out_, n_, m_, pending_, pending_.p0, two, c);
        has_pending_ = false;
    }

private:
    void advance(size_t to) {  // the pending item's k-steps [done_, to)
        const bool two = pending_.p1 - pending_.p0 == 2;
        const uint16_t *xb_p = xb_ + pending_.p0 * (k_ / 2) * kPanel * 2;
        const size_t pstride = (k_ / 2) * kPanel * 2;
        for (; done_ < to; done_++) {
            const uint16_t *a = pending_wb_ + done_ * kChunk, *b = xb_p + done_ * 32 * kPanel;
            if (two) tile_step<true>(a, b, pstride);
            else tile_step<false>(a, b, pstride);
        }
    }

    float *out_;
    size_t n_, m_, k_;
    const uint16_t *xb_;
    uint16_t *wb_[2];
    size_t cur_ = 0, done_ = 0;
    Item pending_{};
    bool has_pending_ = false;
    const uint16_t *pending_wb_ = nullptr;
};

}  // namespace

void linear_quant_bf16(float *out, const float *x, const QuantRows *segs, size_t n_segs, size_t n, size_t k,
                       const std::byte *bias, llaisysDataType_t bias_dt, size_t m) {
    const size_t n_p = ceil_div(ceil_div(m, kPanel), size_t(2)) * 2;
    thread_local std::vector<uint16_t> xb_buf;  // [n_p][k / 2][16][2], kept per calling thread
    if (xb_buf.size() < n_p * k * kPanel) xb_buf.resize(n_p * k * kPanel);
    uint16_t *xb = xb_buf.data();
    pack_x(xb, x, m, k, n_p);

    const size_t n_used = ceil_div(m, kPanel), n_mb = ceil_div(n_used, kRowsMax / kPanel);
    size_t items = 0;  // (group of kRowsW rows of one segment, block of activation panels)
    for (size_t i = 0; i < n_segs; i++) items += ceil_div(segs[i].rows, kRowsW) * n_mb;
    const bool pipelined = n_used <= 2;
    // [threads][2][k / 32][kRowsW][32] each thread's weight rows in bf16, allocated out here: an
    // exception may not leave a parallel region
    const size_t per_thread = 2 * kRowsW * k;
    thread_local std::vector<uint16_t> wb_buf;
    if (wb_buf.size() < size_t(omp_get_max_threads()) * per_thread) wb_buf.resize(size_t(omp_get_max_threads()) * per_thread);
    uint16_t *wb_all = wb_buf.data();  // (a plain pointer: in the region each thread has its own thread_locals)
#pragma omp parallel
    {
        load_tile_config();
        uint16_t *wb = wb_all + size_t(omp_get_thread_num()) * per_thread;
        if (pipelined) {
            Pipeline pipe(out, n, m, k, xb, wb);
#pragma omp for schedule(static) nowait
            for (ptrdiff_t t = 0; t < ptrdiff_t(items); t++) pipe.add(item_at(size_t(t), segs, n_mb, n_used, bias, bias_dt));
            pipe.finish();
        } else {
            size_t wb_group = SIZE_MAX;  // the (segment, group) wb holds
#pragma omp for schedule(static) nowait
            for (ptrdiff_t t = 0; t < ptrdiff_t(items); t++) {
                const Item it = item_at(size_t(t), segs, n_mb, n_used, bias, bias_dt);
                if (wb_group != size_t(t) / n_mb) {  // a thread's consecutive items share a group when m > kRowsMax
                    dequant_item(wb, it, k, [](size_t) {});
                    wb_group = size_t(t) / n_mb;
                }
                for (size_t p = it.p0; p < it.p1; p += 2) {
                    alignas(64) float c[4 * 256];  // [panel p, p + 1][A tile 0, 1][16 rows][16 activation rows]
                    const bool two = p + 1 < it.p1;
                    const uint16_t *xb_p = xb + p * (k / 2) * kPanel * 2;
                    if (two) run_panels<true>(c, wb, xb_p, k);
                    else run_panels<false>(c, wb, xb_p, k);
                    write_out(out, n, m, it, p, two, c);
                }
            }
        }
        _tile_release();
    }
}

}  // namespace llaisys::ops::cpu::amx

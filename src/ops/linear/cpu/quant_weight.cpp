// QuantWeight (row ranges of GGUF blocks) and linear_quant: activations quantized once per call
// (quant_kernels.hpp), then the integer dot products of the active ISA over chunks of weight
// rows, OpenMP over the chunks.
#include "quant_weight.hpp"

#include "../../../quant/dequant.hpp"
#include "../../../utils/checked.hpp"
#include "../../../utils/cpu_isa.hpp"
#include "../../../utils/error.hpp"
#include "../../../utils/parallel.hpp"
#include "../../../utils/types.hpp"
#include "../../cpu_simd/row_kernels.hpp"
#include "quant_gemm.hpp"
#include "quant_kernels.hpp"
#include "quant_plan.hpp"
#include "quant_x16.hpp"

#include <algorithm>
#include <cstring>

namespace llaisys::ops::cpu {
namespace {

// Weight rows per work item: a chunk of this many rows stays in L1 while every activation
// row passes over it (16 rows of Q4_K at k = 1536 are 14 KiB).
constexpr size_t kChunkRows = 16;
static_assert(kChunkRows == x16::kRows);

// m activation rows quantized for the int8 kernels: Q8_32 blocks for the formats that read
// them, Q8_K blocks for the K-quants, in buffers kept per thread across calls (one caller at a
// time on a thread: neither entry point below calls the other).
struct QuantizedActs {
    const BlockQ8_32 *q32;
    const BlockQ8_K *qk;
    size_t nb32, nbk;  // blocks a row (0: not made)

    // row 0 of the blocks dt's kernel reads, and their stride and count a row
    const std::byte *rows_for(llaisysDataType_t dt, size_t &stride, size_t &nb) const {
        const bool k_quant = reads_q8k(dt);
        nb = k_quant ? nbk : nb32;
        stride = nb * (k_quant ? sizeof(BlockQ8_K) : sizeof(BlockQ8_32));
        return k_quant ? reinterpret_cast<const std::byte *>(qk) : reinterpret_cast<const std::byte *>(q32);
    }
};

QuantizedActs quantize_acts(const float *x, size_t m, size_t k, bool need32, bool needk) {
    thread_local std::vector<BlockQ8_32> xq32;
    thread_local std::vector<BlockQ8_K> xqk;
    const size_t nb32 = need32 ? k / 32 : 0, nbk = needk ? k / quant::kBlockK : 0;
    if (xq32.size() < m * nb32) xq32.resize(m * nb32);
    if (xqk.size() < m * nbk) xqk.resize(m * nbk);
    BlockQ8_32 *q32 = xq32.data();
    BlockQ8_K *qk = xqk.data();
    const auto quantize = simd::row_kernels().quantize_q8_32;
    const auto quantize_k = simd::row_kernels().quantize_q8_k;
#pragma omp parallel for schedule(static) if (m * k >= 65536)
    for (ptrdiff_t i = 0; i < ptrdiff_t(m); i++) {
        if (need32) quantize(x + size_t(i) * k, q32 + size_t(i) * nb32, nb32);
        if (needk) quantize_k(x + size_t(i) * k, qk + size_t(i) * nbk, nbk);
    }
    return {q32, qk, nb32, nbk};
}

// Chunk `chunk` (kChunkRows rows from row r0 = chunk * kChunkRows) of segment s against m
// quantized activation rows: out[i * n + r] for the chunk's rows r.
void dot_chunk(const QuantRows &s, size_t chunk, float *out, size_t n, const QuantizedActs &acts, size_t xrow,
               size_t m) {
    size_t stride, nb;
    const std::byte *xq = acts.rows_for(s.dt, stride, nb) + xrow * stride;
    const size_t r0 = chunk * kChunkRows, rows = std::min(kChunkRows, s.rows - r0);
    const QuantPlan &plan = quant_plan(s.dt);  // (a tensor's own bytes: file rows, whatever the plan's layout)
    if (s.x16)  // chunk c is group c (kChunkRows == x16::kRows)
        plan.dot_x16(s.dt, out, n, s.data + chunk * nb * x16::block_bytes(s.dt), rows, xq, stride, m, nb);
    else
        plan.dot_rows(s.dt, out, n, s.data + r0 * s.row_bytes, s.row_bytes, rows, xq, stride, m, nb);
}

}  // namespace

QuantWeight::QuantWeight(size_t n, size_t k) : n_(n), k_(k) {
    LLAISYS_CHECK_ARG(n > 0 && k > 0, "quant weight: shape [", n, ", ", k, "] is empty");
}

void QuantWeight::set_rows(size_t row0, size_t rows, const void *blocks, llaisysDataType_t dt) {
    LLAISYS_CHECK(is_quant_dtype(dt), LLAISYS_STATUS_DTYPE_MISMATCH, "quant weight: dtype ", dtype_name(dt),
                  " is not block-quantized (", kQuantDtypeNames, " are)");
    LLAISYS_CHECK(k_ % quant_block_size(dt) == 0, LLAISYS_STATUS_SHAPE_MISMATCH, "quant weight: k = ", k_,
                  " is not a multiple of the ", dtype_name(dt), " block size ", quant_block_size(dt));
    LLAISYS_CHECK_ARG(row0 <= n_ && rows <= n_ - row0, "quant weight: rows [", row0, ", ", row0 + rows,
                      ") outside [0, ", n_, ")");
    if (rows == 0) return;
    LLAISYS_CHECK_ARG(blocks != nullptr, "quant weight: blocks is NULL");
    for (const Segment &s : segs_)
        LLAISYS_CHECK_ARG(row0 + rows <= s.row0 || s.row0 + s.rows <= row0, "quant weight: rows [", row0, ", ",
                          row0 + rows, ") overlap rows [", s.row0, ", ", s.row0 + s.rows, ") set before");
    const size_t nb = k_ / quant_block_size(dt), row_bytes = nb * quant_block_bytes(dt);
    const bool packed = quant_plan(dt).x16;
    const size_t groups = ceil_div(rows, x16::kRows), group_bytes = packed ? nb * x16::block_bytes(dt) : 0;
    const size_t total = packed ? checked_mul(groups, group_bytes, "quant weight: bytes")
                                : checked_mul(rows, row_bytes, "quant weight: bytes");
    Segment seg{row0, rows, {}};
    seg.data.reset(static_cast<std::byte *>(host_alloc_weight(checked_round_up(total, 64, "quant weight: bytes"))));
    const auto *src = static_cast<const std::byte *>(blocks);
    std::byte *dst = seg.data.get();
    // in parallel: first touch places the pages with the threads that read them
    if (packed) {
#pragma omp parallel for schedule(static) if (total > (size_t(1) << 20))
        for (ptrdiff_t g = 0; g < ptrdiff_t(groups); g++) {
            const size_t r0 = size_t(g) * x16::kRows;
            x16::pack(dt, dst + size_t(g) * group_bytes, src + r0 * row_bytes, std::min(x16::kRows, rows - r0), nb);
        }
    } else {
#pragma omp parallel for schedule(static) if (total > (size_t(1) << 20))
        for (ptrdiff_t r = 0; r < ptrdiff_t(rows); r++) std::memcpy(dst + r * row_bytes, src + r * row_bytes, row_bytes);
    }
    auto at = std::lower_bound(segs_.begin(), segs_.end(), row0, [](const Segment &s, size_t r) { return s.row0 < r; });
    const size_t idx = size_t(at - segs_.begin());
    views_.insert(views_.begin() + ptrdiff_t(idx), QuantRows{row0, rows, dt, row_bytes, seg.data.get(), packed});
    segs_.insert(at, std::move(seg));
    rows_set_ += rows;
    bytes_ += total;
}

void QuantWeight::row_f32(size_t j, float *dst) const {
    LLAISYS_CHECK(j < n_, LLAISYS_STATUS_OUT_OF_RANGE, "quant weight: row ", j, " outside [0, ", n_, ")");
    for (const QuantRows &s : views_)
        if (j >= s.row0 && j < s.row0 + s.rows) {
            const size_t nb = k_ / quant_block_size(s.dt);
            quant::dequantize_row(file_blocks(s, j - s.row0, 0, nb, nullptr), s.dt, dst, k_);
            return;
        }
    fail(LLAISYS_STATUS_INVALID_ARGUMENT, "quant weight: row ", j, " was never set");
}

const std::byte *file_blocks(const QuantRows &s, size_t r, size_t b0, size_t nbk, std::byte *scratch) {
    const size_t bb = quant_block_bytes(s.dt);
    if (!s.x16) return s.data + r * s.row_bytes + b0 * bb;
    const size_t nb = s.row_bytes / bb;
    if (!scratch) {
        thread_local std::vector<std::byte> own;
        if (own.size() < nbk * bb) own.resize(nbk * bb);
        scratch = own.data();
    }
    x16::unpack_row(s.dt, scratch, s.data + r / x16::kRows * nb * x16::block_bytes(s.dt), r % x16::kRows, b0, nbk);
    return scratch;
}

void linear_quant(float *out, const float *x, const QuantWeight &w, const std::byte *bias, llaisysDataType_t bias_dt,
                  size_t m) {
    LLAISYS_CHECK_ARG(w.complete(), "quantized linear: the weight's rows are not all set");
    linear_quant_rows(out, x, w.views().data(), w.views().size(), w.n(), w.k(), bias, bias_dt, m);
}

void linear_quant_rows(float *out, const float *x, const QuantRows *segs, size_t n_segs, size_t n, size_t k,
                       const std::byte *bias, llaisysDataType_t bias_dt, size_t m) {
    LLAISYS_CHECK(!bias || is_float_dtype(bias_dt), LLAISYS_STATUS_DTYPE_MISMATCH, "quantized linear: bias dtype ",
                  dtype_name(bias_dt), " is not f32, f16 or bf16");
    if (m == 0) return;
    size_t f32_from = 0;  // the float path wins from this many rows on, for every segment's dtype
    for (size_t i = 0; i < n_segs; i++) f32_from = std::max(f32_from, quant_plan(segs[i].dt).f32_from(segs[i].x16));
    if (m >= f32_from) {
        linear_quant_f32(out, x, segs, n_segs, n, k, bias, bias_dt, m);
        return;
    }
    bool need32 = false, needk = false;
    for (size_t i = 0; i < n_segs; i++) (reads_q8k(segs[i].dt) ? needk : need32) = true;
    const QuantizedActs acts = quantize_acts(x, m, k, need32, needk);

    size_t items = 0;  // chunks of kChunkRows rows of one segment
    for (size_t i = 0; i < n_segs; i++) items += ceil_div(segs[i].rows, kChunkRows);
    // each thread streams its own share of the groups; one done first takes the others' last
    parallel_for_stealing(items, [&](size_t t) {
        size_t c = t, si = 0;
        while (c >= ceil_div(segs[si].rows, kChunkRows)) c -= ceil_div(segs[si++].rows, kChunkRows);
        const auto &s = segs[si];
        const size_t r0 = c * kChunkRows, rows = std::min(kChunkRows, s.rows - r0), j0 = s.row0 + r0;
        dot_chunk(s, c, out + j0, n, acts, 0, m);
        if (bias) {
            dispatch_float(bias_dt, [&](auto tag) {
                const auto *b = reinterpret_cast<const decltype(tag) *>(bias) + j0;  // [rows]
                for (size_t i = 0; i < m; i++)
                    for (size_t r = 0; r < rows; r++) out[i * n + j0 + r] += to_f32(b[r]);
            });
        }
    });
}

bool linear_quant_grouped(float *out, const float *x, const QuantWeight *const *w, const int32_t *rows,
                          size_t n_groups) {
    size_t n = 0, k = 0, m_all = size_t(rows[n_groups]) - size_t(rows[0]);
    bool need32 = false, needk = false;
    for (size_t g = 0; g < n_groups; g++) {
        const size_t m = size_t(rows[g + 1] - rows[g]);
        if (m == 0) continue;
        LLAISYS_CHECK_ARG(w[g]->complete(), "quantized linear: the weight's rows are not all set");
        if (n == 0) n = w[g]->n(), k = w[g]->k();
        LLAISYS_CHECK_ARG(w[g]->n() == n && w[g]->k() == k, "grouped quantized linear: the weights differ in shape");
        for (const QuantRows &s : w[g]->views()) {
            if (m >= quant_plan(s.dt).f32_from(s.x16)) return false;
            (reads_q8k(s.dt) ? needk : need32) = true;
        }
    }
    if (n == 0) return true;
    const QuantizedActs acts = quantize_acts(x + size_t(rows[0]) * k, m_all, k, need32, needk);
    // work items: chunks of kChunkRows rows of one segment of one group's weight, in order
    struct Item {
        uint32_t g, seg, chunk;
    };
    thread_local std::vector<Item> items;
    items.clear();
    for (size_t g = 0; g < n_groups; g++) {
        if (rows[g + 1] == rows[g]) continue;
        const auto &views = w[g]->views();
        for (size_t si = 0; si < views.size(); si++)
            for (size_t c = 0; c < ceil_div(views[si].rows, kChunkRows); c++)
                items.push_back(Item{uint32_t(g), uint32_t(si), uint32_t(c)});
    }
    const Item *item = items.data();  // (a thread_local named in the loop would be each thread's own)
    parallel_for_stealing(items.size(), [&](size_t t) {
        const Item it = item[t];
        const QuantRows &s = w[it.g]->views()[it.seg];
        const size_t row = size_t(rows[it.g] - rows[0]), m = size_t(rows[it.g + 1] - rows[it.g]);
        dot_chunk(s, it.chunk, out + size_t(rows[it.g]) * n + s.row0 + size_t(it.chunk) * kChunkRows, n, acts, row, m);
    });
    return true;
}

}  // namespace llaisys::ops::cpu

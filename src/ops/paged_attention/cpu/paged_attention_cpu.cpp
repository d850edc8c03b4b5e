// One attention kernel for both KV layouts, blocked like flash attention. The batch is cut
// into tiles: a few query tokens of one row x the query heads of one GQA group, all reading
// the same keys, so each block of K/V rows is widened to f32 once for up to kTileQueries
// queries (decode: the group's heads; prefill: several tokens too). The tiles are shared out
// over OpenMP threads largest first (a causal prefill's later tiles see more keys). The tile
// itself (scores, softmax, P.V per block of keys) is attention_tile.inc, built for the
// process's SIMD path; the plain per-key kernel is paged_attention_reference.cpp.
#include "paged_attention_cpu.hpp"

#include "../../../utils/cpu_isa.hpp"
#include "../../../utils/types.hpp"
#include "attention_tile.hpp"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <vector>

namespace llaisys::ops::cpu {
namespace {

constexpr size_t kTileQueries = 32;  // queries a tile aims for (tokens x group heads)

// One unit of parallel work: query tokens [t0, t1) of one row against one kv head.
struct Task {
    int32_t row;   // row of the batch
    int32_t t0;    // first query token (flat index)
    int32_t t1;    // one past the last
    int32_t kh;    // kv head
    size_t cost;   // tokens x (keys read + a block): the order tasks are handed out in
};

// Levels are ordered (cpu_isa.hpp): Avx512Bf16 runs the AVX-512 tile (the dot products are
// for the GEMM's bf16 weights; attention reads f32 queries and f32/f16/bf16/q8_0 K/V).
attn::TileFn tile_kernel() {
    const Isa isa = active_isa();
    if (isa >= Isa::Avx512) return attn::avx512::attend_tile;
    if (isa >= Isa::Avx2) return attn::avx2::attend_tile;
    return attn::scalar::attend_tile;
}

// The tiles of the batch, most work first. Token t sees the entries [n_first[t], n_vis[t])
// of its row (visible_range), both [n_tokens].
std::vector<Task> make_tasks(const AttentionView &view, size_t kv_heads, size_t tile_tokens, int64_t window,
                             std::vector<uint32_t> &n_first, std::vector<uint32_t> &n_vis) {
    std::vector<Task> tasks;
    for (size_t s = 0; s < view.n_seqs; s++) {
        const int64_t *pos = view.kv_pos + view.kv_start[s];
        const size_t n_pos = size_t(view.kv_start[s + 1] - view.kv_start[s]);
        for (int32_t t0 = view.query_start[s]; t0 < view.query_start[s + 1]; t0 += int32_t(tile_tokens)) {
            const int32_t t1 = std::min(view.query_start[s + 1], t0 + int32_t(tile_tokens));
            size_t keys = 0, first = SIZE_MAX;
            for (int32_t t = t0; t < t1; t++) {
                const VisibleRange r = visible_range(pos, n_pos, view.q_pos[t], window);
                n_first[size_t(t)] = uint32_t(r.first);
                n_vis[size_t(t)] = uint32_t(r.end);
                keys = std::max(keys, r.end);
                first = std::min(first, r.first);
            }
            const size_t cost = size_t(t1 - t0) * (keys - std::min(first, keys) + attn::kBlock);
            for (size_t kh = 0; kh < kv_heads; kh++) tasks.push_back({int32_t(s), t0, t1, int32_t(kh), cost});
        }
    }
    std::stable_sort(tasks.begin(), tasks.end(), [](const Task &a, const Task &b) { return a.cost > b.cost; });
    return tasks;
}

template <class TA>
void attention_impl(TA *out, size_t out_stride, const TA *q, size_t q_stride, const std::byte *k_cache,
                    const std::byte *v_cache, llaisysDataType_t kvdt, const AttentionView &view, size_t heads,
                    size_t kv_heads, size_t d, size_t dv, float scale, int64_t window) {
    const size_t group = heads / kv_heads;
    const size_t n_tokens = size_t(view.query_start[view.n_seqs]);
    const size_t tile_tokens = std::max<size_t>(1, kTileQueries / group);
    const size_t max_rows = tile_tokens * group;  // queries per tile at most
    const size_t dp = attn::padded(d), dvp = attn::padded(dv);
    std::vector<uint32_t> n_first(n_tokens), n_vis(n_tokens);  // [n_tokens] entries [first, vis) each token sees
    const std::vector<Task> tasks = make_tasks(view, kv_heads, tile_tokens, window, n_first, n_vis);
    if (tasks.empty()) return;
    const attn::TileFn attend = tile_kernel();
#pragma omp parallel
    {
        std::vector<float> qf(max_rows * dp);    // [R, dp] the tile's queries, scaled, zero padded
        std::vector<float> of(max_rows * dvp);   // [R, dvp] their outputs
        std::vector<uint32_t> first(max_rows), vis(max_rows);  // [R] entries [first, vis) each of them sees
        std::vector<float> ws(attn::workspace_floats(max_rows, d, dv));
#pragma omp for schedule(dynamic, 1)
        for (ptrdiff_t i = 0; i < ptrdiff_t(tasks.size()); i++) {
            const Task &task = tasks[size_t(i)];
            const size_t rows = size_t(task.t1 - task.t0) * group;
            size_t keys = 0, first_key = SIZE_MAX;
            for (size_t r = 0; r < rows; r++) {  // query r: token t0 + r / group, head kh * group + r % group
                const size_t t = size_t(task.t0) + r / group, h = size_t(task.kh) * group + r % group;
                const TA *qh = q + t * q_stride + h * d;
                float *qr = qf.data() + r * dp;
                for (size_t p = 0; p < d; p++) qr[p] = to_f32(qh[p]) * scale;
                std::fill(qr + d, qr + dp, 0.0f);
                vis[r] = n_vis[t];
                first[r] = n_first[t];
                keys = std::max(keys, size_t(vis[r]));
                first_key = std::min(first_key, size_t(first[r]));
            }
            const attn::TileJob job{k_cache,  v_cache,  int(kvdt),  kv_heads,
                                    size_t(task.kh), d, dv,
                                    view.kv_slots + view.kv_start[task.row],
                                    std::min(first_key, keys), keys, rows, first.data(), vis.data(),
                                    qf.data(), of.data()};
            attend(job, ws.data());
            for (size_t r = 0; r < rows; r++) {
                const size_t t = size_t(task.t0) + r / group, h = size_t(task.kh) * group + r % group;
                TA *o = out + t * out_stride + h * dv;
                for (size_t p = 0; p < dv; p++) o[p] = from_f32<TA>(of[r * dvp + p]);
            }
        }
    }
}

}  // namespace

void check_kv_dtype(llaisysDataType_t kvdt, size_t d, size_t dv) {
    if (kvdt != LLAISYS_DTYPE_Q8_0) {
        dispatch_float(kvdt, [](auto) {});  // f32, f16 or bf16, else DTYPE_MISMATCH
        return;
    }
    LLAISYS_CHECK(d % quant_block_size(kvdt) == 0 && dv % quant_block_size(kvdt) == 0, LLAISYS_STATUS_SHAPE_MISMATCH,
                  "paged_attention: a q8_0 KV cache needs head dims that are multiples of 32, got ", d, " and ", dv);
}

VisibleRange visible_range(const int64_t *pos, size_t n, int64_t p, int64_t window) {
    const size_t end = size_t(std::upper_bound(pos, pos + n, p) - pos);  // kv_pos <= p
    if (window <= 0 || p < INT64_MIN + window) return {0, end};          // (p - window would overflow: no bound)
    const size_t first = size_t(std::upper_bound(pos, pos + end, p - window) - pos);  // kv_pos > p - window
    return {first, end};
}

void paged_attention(std::byte *out, size_t out_stride, const std::byte *q, size_t q_stride, llaisysDataType_t act,
                     const std::byte *k_cache, const std::byte *v_cache, llaisysDataType_t kvdt,
                     const AttentionView &view, size_t heads, size_t kv_heads, size_t d, size_t dv, float scale,
                     int64_t window) {
    check_kv_dtype(kvdt, d, dv);  // the tile kernel takes f32, f16, bf16 and q8_0 caches
    dispatch_float(act, [&](auto atag) {
        using TA = decltype(atag);
        attention_impl(reinterpret_cast<TA *>(out), out_stride, reinterpret_cast<const TA *>(q), q_stride, k_cache,
                       v_cache, kvdt, view, heads, kv_heads, d, dv, scale, window);
    });
}

}  // namespace llaisys::ops::cpu

// The inner kernel of paged attention: one query tile (some query tokens of one row x the
// query heads of one GQA group) against the keys of its row, flash-attention style.
// paged_attention_cpu.cpp builds the tiles and picks the build for the process's SIMD path;
// attention_tile.inc holds the kernel, compiled once per path (attention_tile_{scalar,avx2,
// avx512}.cpp, per-file flags in CMakeLists.txt).
#pragma once

#include <cstddef>
#include <cstdint>

namespace llaisys::ops::cpu::attn {

constexpr size_t kBlock = 32;  // keys per block: one max / rescale per block and query
constexpr size_t kPad = 16;    // head dims are padded with zeros to a multiple of this (the widest vector)

// (static: this header is also built with the wider flags of the SIMD files, and an
// external-linkage inline copy from one of those could be the one the linker keeps)
static inline size_t padded(size_t n) { return (n + kPad - 1) / kPad * kPad; }

// One tile's inputs and result. Query r of the tile sees keys [n_first[r], n_vis[r]) of the
// row; the walk starts at first_key (min over r of n_first[r]), so keys before a sliding
// window are never read.
struct TileJob {
    const void *k_cache;     // [n_slots, kv_heads, d] of kv_dtype (Q8_0: d / 32 blocks of 34 bytes a head)
    const void *v_cache;     // [n_slots, kv_heads, dv] of kv_dtype
    int kv_dtype;            // llaisysDataType_t: F32, F16, BF16, or Q8_0 (d, dv multiples of 32)
    size_t kv_heads, kh;     // kv heads per slot, the one this tile reads
    size_t d, dv;            // head dims; dp = padded(d), dvp = padded(dv)
    const int32_t *slots;    // [n_keys] cache slot of each key of the row, in position order
    size_t first_key;        // first key the tile reads: min over r of n_first[r]
    size_t n_keys;           // one past the last: max over r of n_vis[r]
    size_t rows;             // R: queries in the tile
    const uint32_t *n_first; // [R] first key each query sees
    const uint32_t *n_vis;   // [R] one past its last
    const float *q;          // [R, dp] queries, already multiplied by the softmax scale
    float *out;              // [R, dvp] result, normalised; zeros for a query that sees no key
};

// f32 scratch one thread needs for tiles of up to `rows` queries.
static inline size_t workspace_floats(size_t rows, size_t d, size_t dv) {
    return kBlock * padded(d)      // kf [kBlock, dp]  the block's keys in f32
           + kBlock * padded(dv)   // vf [kBlock, dvp] its values in f32
           + rows * kBlock         // p  [R, kBlock]   scores, then probabilities
           + 2 * rows;             // m, l [R]        running max and denominator
}

using TileFn = void (*)(const TileJob &job, float *workspace);

namespace scalar {
void attend_tile(const TileJob &job, float *workspace);
}
namespace avx2 {
void attend_tile(const TileJob &job, float *workspace);
}
namespace avx512 {
void attend_tile(const TileJob &job, float *workspace);
}

}  // namespace llaisys::ops::cpu::attn

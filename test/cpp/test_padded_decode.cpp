// The padded decode steps' bookkeeping (src/models/decoder/padded_decode.*), which CUDA graphs
// replay: the buckets and widths, which steps are served, and the padded arrays. Needs no GPU.
#include "../../src/models/decoder/padded_decode.hpp"
#include "unit.hpp"

#include <vector>

using namespace llaisys::models;

namespace {

// A decode step of n rows over a BLOCK cache of block size bs: row s has context ctx[s], its
// token at position ctx[s] - 1, in the blocks 100 s, 100 s + 1, ... of a table `cols` wide.
struct Step {
    std::vector<int64_t> ids, pos, slots;
    std::vector<int32_t> qs, tables, ctx, rows;
    llaisysBatch_t b{};
    Step(const std::vector<int32_t> &contexts, size_t bs, size_t cols) : ctx(contexts) {
        const size_t n = ctx.size();
        for (size_t s = 0; s < n; s++) {
            ids.push_back(int64_t(7 + s));
            pos.push_back(ctx[s] - 1);
            for (size_t j = 0; j < cols; j++) tables.push_back(int32_t(100 * s + j));
            slots.push_back(int64_t(tables[s * cols + size_t(pos[s]) / bs]) * int64_t(bs) + pos[s] % int64_t(bs));
            qs.push_back(int32_t(s));
            rows.push_back(int32_t(s));
        }
        qs.push_back(int32_t(n));
        b.n_tokens = n;
        b.token_ids = ids.data();
        b.positions = pos.data();
        b.n_seqs = n;
        b.query_start = qs.data();
        b.slot_mapping = slots.data();
        b.block_tables = tables.data();
        b.max_blocks = cols;
        b.context_lens = ctx.data();
        b.n_sample = n;
        b.sample_rows = rows.data();
    }
};

void buckets() {
    const size_t want[][2] = {{1, 1}, {2, 2}, {3, 4}, {4, 4}, {5, 8}, {8, 8}, {9, 16}, {64, 64}, {65, 72}, {512, 512}};
    for (const auto &w : want) EXPECT(PaddedDecode::bucket(w[0]) == w[1], "the bucket of n rows");
    EXPECT(PaddedDecode::bucket(0) == 0 && PaddedDecode::bucket(513) == 0, "no bucket for 0 or over kMaxRows");
    for (size_t n = 1; n <= PaddedDecode::kMaxRows; n++) {
        const size_t B = PaddedDecode::bucket(n);
        EXPECT(B >= n && (B <= 4 || B % 8 == 0) && B - n < 8, "every bucket holds its rows, fewer than 8 padding");
    }
    EXPECT(PaddedDecode::width(0) == 16 && PaddedDecode::width(16) == 16 && PaddedDecode::width(17) == 32,
           "widths: powers of two from 16");
    EXPECT(PaddedDecode::width(8192) == 8192 && PaddedDecode::width(8193) == 0, "no width over kMaxWidth");
}

void served() {
    Step d({5, 40, 17}, 16, 8);
    PaddedShape sh = PaddedDecode::shape_of(d.b, 16);
    EXPECT(sh.rows == 4 && sh.width == 16, "3 decode rows of up to 3 blocks: 4 rows, 16 columns");
    EXPECT(PaddedDecode::shape_of(d.b, 0).rows == 0, "not without a block size (the SLOT layout)");
    Step wide({16 * 40}, 16, 40);
    sh = PaddedDecode::shape_of(wide.b, 16);
    EXPECT(sh.rows == 1 && sh.width == 64, "40 blocks: 64 columns");

    Step p({5, 40}, 16, 8);  // a prefill row of 2 tokens: not a decode step
    p.qs = {0, 2, 3};
    p.b.n_tokens = 3;
    EXPECT(PaddedDecode::shape_of(p.b, 16).rows == 0, "a row of two tokens is not padded");
    Step r({5, 40}, 16, 8);
    r.rows = {1, 0};
    EXPECT(PaddedDecode::shape_of(r.b, 16).rows == 0, "sample rows out of row order are not padded");
    r.b.n_sample = 1;
    r.rows = {0};
    EXPECT(PaddedDecode::shape_of(r.b, 16).rows == 0, "a row not sampled is not padded");
    Step none({5}, 16, 8);
    none.b.block_tables = nullptr;
    EXPECT(PaddedDecode::shape_of(none.b, 16).rows == 0, "no block tables: not padded");
}

void padded() {
    Step d({5, 40, 17}, 16, 3);
    PaddedDecode pad;
    const PaddedShape sh = PaddedDecode::shape_of(d.b, 16);
    const llaisysBatch_t &pb = pad.pad(d.b, sh);
    EXPECT(pb.n_tokens == 4 && pb.n_seqs == 4 && pb.n_sample == 4 && pb.max_blocks == 16, "the padded sizes");
    for (size_t s = 0; s < 3; s++) {
        EXPECT(pb.token_ids[s] == d.ids[s] && pb.positions[s] == d.pos[s] && pb.slot_mapping[s] == d.slots[s] &&
                   pb.context_lens[s] == d.ctx[s],
               "a real row is unchanged");
        for (size_t j = 0; j < 3; j++) EXPECT(pb.block_tables[s * 16 + j] == d.tables[s * 3 + j], "its table");
    }
    EXPECT(pb.token_ids[3] == 0 && pb.positions[3] == 0 && pb.slot_mapping[3] == -1 && pb.context_lens[3] == 0,
           "a padding row: token 0 at position 0, no slot, no context");
    for (size_t i = 0; i <= 4; i++) EXPECT(pb.query_start[i] == int32_t(i), "one token a row");
    for (size_t i = 0; i < 4; i++) EXPECT(pb.sample_rows[i] == int32_t(i), "every row sampled in order");

    // the same object again, narrower and wider: no stale entries survive
    Step one({3}, 16, 20);
    const llaisysBatch_t &p1 = pad.pad(one.b, PaddedDecode::shape_of(one.b, 16));
    EXPECT(p1.n_seqs == 1 && p1.max_blocks == 16 && p1.block_tables[0] == 0 && p1.slot_mapping[0] == one.slots[0],
           "a later, smaller step is padded afresh (only the columns that fit are copied)");
    Step many(std::vector<int32_t>(9, 1), 16, 1);
    const llaisysBatch_t &p9 = pad.pad(many.b, PaddedDecode::shape_of(many.b, 16));
    bool clean = p9.n_seqs == 16;
    for (size_t s = 9; s < 16; s++) clean = clean && p9.slot_mapping[s] == -1 && p9.context_lens[s] == 0;
    for (size_t e = 9 * 16; e < 16 * 16; e++) clean = clean && p9.block_tables[e] == 0;
    EXPECT(clean, "9 rows padded to 16: the 7 padding rows are inert");
}

}  // namespace

int main() {
    buckets();
    served();
    padded();
    return finish();
}

// The pipelined int8 GEMV's byte mapping (src/ops/linear/nvidia/int8_layout.hpp), checked on the
// host against the CPU's dequantization (src/quant/dequant.cpp): random Q4_K, Q6_K and Q8_0
// blocks are placed at every even offset of a 16-byte aligned buffer, each item's 16-byte
// aligned chunks are read as the kernel reads them (each must hold a byte of the block, so it
// lies inside the block's allocation), its quant values and scales extracted with the
// kernel's functions, and every element of the block, reached once by exactly one item,
// must equal the CPU's dequantized value bit for bit (the same f32 operations in the same
// order), which pins the element each lane multiplies by each activation too.
#include "../../src/ops/linear/nvidia/int8_layout.hpp"
#include "unit.hpp"

#include <cstring>
#include <random>
#include <vector>

using namespace llaisys;
using namespace llaisys::ops::int8;

namespace {

std::mt19937 rng(7);

// A 16-byte aligned buffer holding one block at byte offset `at`, the bytes around it random.
struct Placed {
    alignas(16) uint8_t buf[512];
    size_t at, size;
    Placed(const void *blk, size_t size_, size_t at_) : at(at_), size(size_) {
        for (uint8_t &b : buf) b = uint8_t(rng());
        std::memcpy(buf + at, blk, size);
    }
    // The chunk at byte c (a multiple of 16) as four little-endian words, as the kernel's
    // 16-byte loads see it; the chunk must hold a byte of the block.
    void chunk(size_t c, uint32_t *w) {
        EXPECT(c % 16 == 0 && c < at + size && c + 16 > at, "a chunk that holds a byte of the block");
        std::memcpy(w, buf + c, 16);
    }
    // NW / 4 consecutive chunks from the one holding block offset off, as the kernel loads an
    // item's span (two for Q6_K's 16 bytes, three for a Q8_0 block), and off's offset in them.
    template <int NW>
    unsigned chunks(size_t off, uint32_t (&w)[NW]) {
        const size_t p = at + off, c0 = p & ~size_t(15);
        for (int c = 0; c < NW / 4; c++) chunk(c0 + 16 * c, w + 4 * c);
        return unsigned(p & 15);
    }
};

float f16(uint32_t bits) { return to_f32(fp16_t{uint16_t(bits)}); }
uint8_t byte(const uint32_t (&w)[4], int i) { return uint8_t(w[i / 4] >> (8 * (i % 4))); }

void check_q4k(const quant::BlockQ4_K &b, size_t at) {
    float want[256];
    quant::dequantize_block(b, want);
    Placed pl(&b, sizeof(b), at);
    int seen[256] = {};
    for (int u = 0; u < kItemsQ4K; u++) {
        uint32_t h[4], q[4];
        pl.chunk(at + 0, h);  // the kernel's blocks are 16-byte aligned: at % 16 == 0 here
        pl.chunk(at + q4k_qs_offset(u), q);
        int sc[2], mn[2];
        q4k_scale_min(h[1], h[2], h[3], u / 2, sc, mn);
        const float d = f16(h[0] & 0xFFFF), dmin = f16(h[0] >> 16);
        for (int half = 0; half < 2; half++) {
            const float dl = d * float(sc[half]), ml = dmin * float(mn[half]);
            for (int i = 0; i < 16; i++) {
                const int e = q4k_elem(u) + 32 * half + i, v = (byte(q, i) >> (4 * half)) & 0xF;
                const float got = dl * float(v) - ml;
                EXPECT(std::memcmp(&got, &want[e], 4) == 0, "q4_k element");
                seen[e]++;
            }
        }
    }
    for (int c : seen) EXPECT(c == 1, "q4_k: each element once");
}

void check_q6k(const quant::BlockQ6_K &b, size_t at) {
    float want[256];
    quant::dequantize_block(b, want);
    Placed pl(&b, sizeof(b), at);
    int seen[256] = {};
    for (int t = 0; t < kItemsQ6K; t++) {
        uint32_t rl[8], rh[8], ql[4], qh[4], q0[4], q1[4];
        window<4, 3>(rl, pl.chunks(q6k_ql_offset(t), rl), ql);
        window<4, 3>(rh, pl.chunks(q6k_qh_offset(t), rh), qh);
        q6k_values(ql, qh, t, q0, q1);
        const float d = f16(pl.buf[at + q6k_d_offset()] | pl.buf[at + q6k_d_offset() + 1] << 8);
        for (int half = 0; half < 2; half++) {
            const int u = q6k_unit(t) + 4 * half;
            const float dl = d * float(int8_t(pl.buf[at + q6k_scale_offset(t) + 4 * half]));
            for (int i = 0; i < 16; i++) {
                const float got = dl * float(int(byte(half ? q1 : q0, i)) - 32);
                EXPECT(std::memcmp(&got, &want[16 * u + i], 4) == 0, "q6_k element");
                seen[16 * u + i]++;
            }
        }
    }
    for (int c : seen) EXPECT(c == 1, "q6_k: each element once");
}

void check_q80(const quant::BlockQ8_0 &b, size_t at) {
    float want[32];
    quant::dequantize_block(b, want);
    Placed pl(&b, sizeof(b), at);
    uint32_t raw[12], d_bits, q[8];
    q80_fields(raw, pl.chunks(0, raw), d_bits, q);
    for (int i = 0; i < 32; i++) {
        const float got = float(int8_t(q[i / 4] >> (8 * (i % 4)))) * f16(d_bits);
        EXPECT(std::memcmp(&got, &want[i], 4) == 0, "q8_0 element");
    }
}

template <class B>
B random_block() {
    B b;
    uint8_t *p = reinterpret_cast<uint8_t *>(&b);
    for (size_t i = 0; i < sizeof(B); i++) p[i] = uint8_t(rng());
    return b;
}

// A finite f16 scale (random bits may be NaN or infinite, which compare unequal to themselves).
fp16_t scale() { return fp16_t{uint16_t(0x1000 + rng() % 0x3000)}; }

}  // namespace

int main() {
    for (int rep = 0; rep < 40; rep++) {
        auto q4 = random_block<quant::BlockQ4_K>();
        q4.d = scale(), q4.dmin = scale();
        for (size_t at : {0u, 16u, 144u}) check_q4k(q4, at);
        auto q6 = random_block<quant::BlockQ6_K>();
        q6.d = scale();
        auto q8 = random_block<quant::BlockQ8_0>();
        q8.d = scale();
        for (size_t at = 0; at < 32; at += 2) {
            check_q6k(q6, at + 16);
            check_q80(q8, at + 16);
        }
    }
    uint32_t w[4] = {0x03020100u, 0x07060504u, 0x0B0A0908u, 0x0F0E0D0Cu}, out[2];
    window<2, 1>(w, 6, out);  // bytes 6 .. 13
    EXPECT(out[0] == 0x09080706u && out[1] == 0x0D0C0B0Au, "window: bytes s .. s + 8");
    return finish();
}

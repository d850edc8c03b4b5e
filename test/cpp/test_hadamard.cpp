// kv::hadamard (src/kv_cache/hadamard.*), the basis of a q8_0 KV cache: each block equals the
// product with Sylvester's Hadamard matrix over sqrt(n) (computed here in double), H is its own
// inverse and keeps dot products (so attention over rotated q and k is unchanged), blocks stay
// inside a row and the stride's tail is left alone, and the block sizes per head_dim.
#include "../../src/kv_cache/hadamard.hpp"
#include "../../src/utils/error.hpp"
#include "unit.hpp"

#include <cmath>
#include <random>
#include <vector>

using llaisys::kv::hadamard;

// Sylvester's H_n [i][j] = (-1)^popcount(i & j) / sqrt(n).
static double sylvester(size_t n, size_t i, size_t j) {
    return (__builtin_popcountll(i & j) % 2 ? -1.0 : 1.0) / std::sqrt(double(n));
}

int main() {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 5.0f);
    for (size_t block : {2u, 32u, 64u, 128u}) {
        const size_t width = 2 * block, stride = width + 3, rows = 3;
        std::vector<float> x(rows * stride), y;
        for (float &v : x) v = normal(rng);
        x[5] = 130.0f;  // an outlier, as Qwen2's keys carry
        y = x;
        hadamard(y.data(), rows, width, stride, block);
        double worst = 0.0;
        for (size_t r = 0; r < rows; r++) {
            for (size_t c = 0; c < width; c++) {
                const size_t b0 = c / block * block;
                double want = 0.0;
                for (size_t j = 0; j < block; j++) want += sylvester(block, c - b0, j) * x[r * stride + b0 + j];
                worst = std::fmax(worst, std::fabs(want - y[r * stride + c]));
            }
            for (size_t c = width; c < stride; c++) EXPECT(y[r * stride + c] == x[r * stride + c], "tail untouched");
        }
        EXPECT(worst < 1e-4, "each block is H x");
        // dot products of rows are kept, and a second call gives x back
        double dx = 0.0, dy = 0.0;
        for (size_t c = 0; c < width; c++) {
            dx += double(x[c]) * x[stride + c];
            dy += double(y[c]) * y[stride + c];
        }
        EXPECT(std::fabs(dx - dy) < 1e-3 * (1.0 + std::fabs(dx)), "q.k == (Hq).(Hk)");
        hadamard(y.data(), rows, width, stride, block);
        double back = 0.0;
        for (size_t i = 0; i < x.size(); i++) back = std::fmax(back, std::fabs(double(y[i]) - x[i]));
        EXPECT(back < 1e-4, "H H x == x");
    }
    // the outlier is spread: no value of its rotated block keeps more than a 1/sqrt(n) share
    std::vector<float> spike(64, 0.0f);
    spike[7] = 128.0f;
    hadamard(spike.data(), 1, 64, 64, 64);
    bool flat = true;
    for (float v : spike) flat = flat && std::fabs(std::fabs(v) - 16.0f) < 1e-5f;
    EXPECT(flat, "a spike of 128 becomes 64 values of +-16");

    EXPECT(llaisys::kv::key_rotation(64) == 64 && llaisys::kv::key_rotation(128) == 128, "keys: the head");
    EXPECT(llaisys::kv::key_rotation(96) == 32 && llaisys::kv::key_rotation(192) == 64, "keys: largest power of 2");
    EXPECT(llaisys::kv::value_rotation(128) == 64 && llaisys::kv::value_rotation(96) == 32, "values: 64 or less");

    bool threw = false;
    try {
        std::vector<float> z(48);
        hadamard(z.data(), 1, 48, 48, 48);  // not a power of two
    } catch (const llaisys::Error &) {
        threw = true;
    }
    EXPECT(threw, "a block that is not a power of two is refused");
    return finish();
}

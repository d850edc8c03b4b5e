// AVX2 + FMA + F16C build of attention_tile.inc (compile flags set in CMakeLists.txt).
#define LLAISYS_ATTN_NS avx2
#include "attention_tile.inc"

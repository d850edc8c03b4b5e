// AVX-512 build of attention_tile.inc (compile flags set in CMakeLists.txt).
#define LLAISYS_ATTN_NS avx512
#include "attention_tile.inc"

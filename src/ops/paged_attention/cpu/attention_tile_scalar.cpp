// Baseline build of attention_tile.inc (no SIMD flags): the LLAISYS_ISA=scalar path.
#define LLAISYS_ATTN_NS scalar
#include "attention_tile.inc"

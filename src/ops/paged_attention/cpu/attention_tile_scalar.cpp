// Baseline build of attention_tile.inc (no -m flags: SSE2 on x86-64): the LLAISYS_ISA=scalar path.
#define LLAISYS_ATTN_NS scalar
#include "attention_tile.inc"

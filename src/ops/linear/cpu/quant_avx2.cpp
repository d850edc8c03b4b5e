// AVX2 build of quant_dot.inc (maddubs + madd) and quant_dequant.inc (compile flags set in
// CMakeLists.txt).
#define LLAISYS_QUANT_NS quant_avx2
#include "quant_dot.inc"
#include "quant_dequant.inc"

#include "quantize_cpu.hpp"

#include "../../../quant/dequant.hpp"
#include "../../../quant/quantize.hpp"

namespace llaisys::ops::cpu {

void dequantize(std::byte *out, llaisysDataType_t odt, const std::byte *in, llaisysDataType_t qdt, size_t rows,
                size_t k) {
    quant::dequantize_rows(in, qdt, out, odt, rows, k);
}

void quantize(std::byte *out, llaisysDataType_t qdt, const std::byte *in, llaisysDataType_t idt, size_t rows,
              size_t k) {
    quant::quantize_rows(in, idt, out, qdt, rows, k);
}

}  // namespace llaisys::ops::cpu

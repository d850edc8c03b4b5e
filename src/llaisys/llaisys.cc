// C ABI: errors, dtypes, version.
#include "guard.hpp"

#include "../utils/types.hpp"

namespace llaisys::capi {

static thread_local std::string last_error;
static thread_local llaisysStatus_t last_status = LLAISYS_STATUS_OK;

llaisysStatus_t report(llaisysStatus_t status, const std::string &message) {
    last_error = message;
    last_status = status;
    return status;
}

}  // namespace llaisys::capi

extern "C" {

const char *llaisysGetLastError(void) { return llaisys::capi::last_error.c_str(); }

llaisysStatus_t llaisysGetLastStatus(void) { return llaisys::capi::last_status; }

void llaisysClearLastError(void) {
    llaisys::capi::last_error.clear();
    llaisys::capi::last_status = LLAISYS_STATUS_OK;
}

namespace {
// A dtype from any int that may arrive from C (no enum-typed load): INVALID outside the enum.
llaisysDataType_t dtype_from_c(llaisysDataType_t dtype) {
    const int v = llaisys::capi::enum_bits(dtype);
    if (v < 0 || v > LLAISYS_DTYPE_IQ1_M) return LLAISYS_DTYPE_INVALID;
    return llaisysDataType_t(v);
}
}  // namespace

size_t llaisysDataTypeSize(llaisysDataType_t dtype) { return llaisys::dtype_size(dtype_from_c(dtype)); }

size_t llaisysDataTypeBlockSize(llaisysDataType_t dtype) {
    const llaisysDataType_t dt = dtype_from_c(dtype);
    if (llaisys::is_quant_dtype(dt)) return llaisys::quant_block_size(dt);
    return llaisys::dtype_size(dt) ? 1 : 0;
}

size_t llaisysDataTypeBlockBytes(llaisysDataType_t dtype) {
    const llaisysDataType_t dt = dtype_from_c(dtype);
    if (llaisys::is_quant_dtype(dt)) return llaisys::quant_block_bytes(dt);
    return llaisys::dtype_size(dt);
}

const char *llaisysDataTypeName(llaisysDataType_t dtype) { return llaisys::dtype_name(dtype_from_c(dtype)); }

const char *llaisysVersion(void) { return LLAISYS_VERSION_STRING; }

}  // extern "C"

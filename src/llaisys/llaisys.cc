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

size_t llaisysDataTypeSize(llaisysDataType_t dtype) {
    int v = llaisys::capi::enum_bits(dtype);  // any int may arrive here: no enum-typed load
    return v >= 0 && v <= LLAISYS_DTYPE_BOOL ? llaisys::dtype_size(llaisysDataType_t(v)) : 0;
}

const char *llaisysDataTypeName(llaisysDataType_t dtype) {
    int v = llaisys::capi::enum_bits(dtype);
    return v >= 0 && v <= LLAISYS_DTYPE_BOOL ? llaisys::dtype_name(llaisysDataType_t(v)) : "invalid";
}

const char *llaisysVersion(void) { return LLAISYS_VERSION_STRING; }

}  // extern "C"

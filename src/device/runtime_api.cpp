#include "runtime_api.hpp"

#include "../utils/error.hpp"

namespace llaisys::device {

Runtime &runtime(llaisysDeviceType_t device) {
    switch (device) {
    case LLAISYS_DEVICE_CPU: return cpu::runtime();
    case LLAISYS_DEVICE_NVIDIA:
#ifdef LLAISYS_ENABLE_NVIDIA
        return nvidia::runtime();
#else
        fail(LLAISYS_STATUS_UNSUPPORTED, "this build of llaisys has no NVIDIA backend (build with -DLLAISYS_NVIDIA=ON)");
#endif
    default: fail(LLAISYS_STATUS_INVALID_ARGUMENT, "unknown device type ", int(device));
    }
}

void check_device(llaisysDeviceType_t device, int id) {
    int n = runtime(device).device_count();
    LLAISYS_CHECK(n > 0, LLAISYS_STATUS_UNSUPPORTED, "no ", device == LLAISYS_DEVICE_NVIDIA ? "NVIDIA " : "",
                  "device on this machine (no driver or no GPU)");
    LLAISYS_CHECK_ARG(id >= 0 && id < n, "device id ", id, " is out of range: ", n, " device(s) of this type");
}

}  // namespace llaisys::device

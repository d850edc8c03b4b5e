// The process-wide thread count of the CPU kernels (see threads.hpp).
#include "threads.hpp"

#include "../utils/error.hpp"

#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace llaisys::core {

namespace {

// An integer read from a one-line file, or -1.
long read_long(const std::string &path) {
    std::ifstream f(path);
    long v = -1;
    if (!(f >> v)) return -1;
    return v;
}

// Distinct (package, core) pairs of the CPUs in `mask`, from sysfs; 0 when sysfs lacks them.
int cores_from_sysfs(const cpu_set_t &mask) {
    std::set<std::pair<long, long>> cores;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &mask)) continue;
        const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
        const long pkg = read_long(dir + "physical_package_id"), core = read_long(dir + "core_id");
        if (pkg < 0 || core < 0) return 0;
        cores.emplace(pkg, core);
    }
    return int(cores.size());
}

// The same from /proc/cpuinfo ("processor", "physical id", "core id" per logical CPU); 0 when
// it does not say.
int cores_from_cpuinfo(const cpu_set_t &mask) {
    std::ifstream f("/proc/cpuinfo");
    std::set<std::pair<long, long>> cores;
    std::string line;
    long cpu = -1, pkg = 0;
    bool any_core_id = false;
    while (std::getline(f, line)) {
        const auto colon = line.find(':');
        if (colon == std::string::npos) continue;
        const std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
        const long value = std::strtol(line.c_str() + colon + 1, nullptr, 10);
        if (key == "processor") cpu = value, pkg = 0;
        else if (key == "physical id") pkg = value;
        else if (key == "core id" && cpu >= 0 && cpu < CPU_SETSIZE && CPU_ISSET(int(cpu), &mask)) {
            cores.emplace(pkg, value);
            any_core_id = true;
        }
    }
    return any_core_id ? int(cores.size()) : 0;
}

// CPUs a cgroup v2 quota allows ("max 100000" or "200000 100000" in cpu.max), rounded up; 0 if none.
int cgroup_cpu_limit() {
    std::ifstream f("/sys/fs/cgroup/cpu.max");
    std::string quota;
    long period = 0;
    if (!(f >> quota >> period) || quota == "max" || period <= 0) return 0;
    const long q = std::strtol(quota.c_str(), nullptr, 10);
    return q > 0 ? int((q + period - 1) / period) : 0;
}

int initial_threads() {
    const char *env = std::getenv("OMP_NUM_THREADS");
    if (env && *env) return std::clamp(omp_get_max_threads(), 1, kMaxThreads);
    return std::clamp(physical_cores(), 1, kMaxThreads);
}

std::atomic<int> &count() {
    static std::atomic<int> n{initial_threads()};
    return n;
}

}  // namespace

int physical_cores() {
    cpu_set_t mask;
    CPU_ZERO(&mask);
    int logical = 0;
    if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
        logical = CPU_COUNT(&mask);
    } else {
        for (int i = 0; i < omp_get_num_procs() && i < CPU_SETSIZE; ++i) CPU_SET(i, &mask);
        logical = omp_get_num_procs();
    }
    int cores = cores_from_sysfs(mask);
    if (cores == 0) cores = cores_from_cpuinfo(mask);
    if (cores == 0) cores = logical;
    if (const int quota = cgroup_cpu_limit(); quota > 0) cores = std::min(cores, quota);
    return std::max(cores, 1);
}

int default_threads() { return initial_threads(); }

int threads() { return count().load(std::memory_order_relaxed); }

void set_threads(int n) {
    LLAISYS_CHECK_ARG(n >= 1 && n <= kMaxThreads, "threads must be in 1..", kMaxThreads, ", got ", n);
    count().store(n, std::memory_order_relaxed);
}

void apply_threads() {
    thread_local int applied = 0;  // the count this thread last gave OpenMP (0: none yet)
    const int want = threads();
    if (applied != want) {
        omp_set_num_threads(want);
        applied = want;
    }
}

}  // namespace llaisys::core

// The machine a C++ benchmark ran on, as bench/machine.py reports it: the
// CPU model, the last-level cache, the load average. Shared by
// quant_bench.cc and quick.cc.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace tokpos::bench {

inline std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

// "family 25, model 17, AVX-512F" from /proc/cpuinfo's first CPU: which core
// the model name stands for (a VM may show only "AMD EPYC").
inline std::string cpu_family_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, family = "?", model = "?", simd = "no AVX2";
  auto value = [&] { return line.substr(line.find(':') + 2); };
  while (std::getline(f, line)) {
    if (line.rfind("cpu family", 0) == 0) family = value();
    if (line.rfind("model", 0) == 0 && line.rfind("model name", 0) != 0) model = value();
    if (line.rfind("flags", 0) == 0) {
      const std::string flags = " " + value() + " ";
      simd = flags.find(" avx512f ") != std::string::npos ? "AVX-512F"
             : flags.find(" avx2 ") != std::string::npos  ? "AVX2"
                                                          : "no AVX2";
      break;
    }
  }
  return "family " + family + ", model " + model + ", " + simd;
}

inline std::string first_line(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// The 1, 5 and 15 minute load averages, "0.33 1.10 1.96" ("unknown" where
// getloadavg fails).
inline std::string load_average() {
  double l[3] = {};
  if (getloadavg(l, 3) != 3) return "unknown";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", l[0], l[1], l[2]);
  return buf;
}

// The last data or unified cache of cpu0 as "L<level> <size>", e.g. "L3 32768K".
inline std::string last_level_cache() {
  std::string best = "unknown";
  for (int i = 0; i < 16; ++i) {
    const std::string d = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string type = first_line((d + "type").c_str());
    if (type.empty()) continue;
    if (type != "Instruction")
      best = "L" + first_line((d + "level").c_str()) + " " + first_line((d + "size").c_str());
  }
  return best;
}

// The same cache's size in bytes, from sysfs ("32768K": the cache a core
// shares), else sysconf(_SC_LEVEL3_CACHE_SIZE) (glibc's, from cpuid, which on
// some AMD parts counts every L3 of the package); 0 when neither says.
inline int64_t last_level_cache_bytes() {
  int64_t bytes = 0;
  for (int i = 0; i < 16; ++i) {
    const std::string d = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    const std::string type = first_line((d + "type").c_str()), size = first_line((d + "size").c_str());
    if (type.empty() || type == "Instruction" || size.empty()) continue;
    char* end = nullptr;
    const long long n = std::strtoll(size.c_str(), &end, 10);
    const int64_t unit = (*end == 'K') ? 1024 : (*end == 'M') ? (1 << 20) : 1;
    bytes = n * unit;
  }
  if (bytes > 0) return bytes;
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? l3 : 0;
}

}  // namespace tokpos::bench

// What this CPU (and its OS) can run, read once from cpuid: decides which kernel tables the
// dispatcher may choose. The build machine's CPU is never assumed.
#pragma once

#include <string>

namespace inferd::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool amx_int8 = false;
  bool amx_bf16 = false;
  // The CPU has AMX tiles with int8 multiplies, the OS saves their state (XCR0), and it granted
  // this process the tile data (Linux asks each process to request it once).
  bool amx_usable = false;
  // The vendor is Intel (cpuid's "GenuineIntel"): where the memory system differs, a kernel
  // measured on both may choose by it (avx512::packed_kernels).
  bool intel = false;

  bool has_avx2_set() const { return avx2 && fma && f16c; }
  bool has_avx512_vnni_set() const { return avx512f && avx512bw && avx512vl && avx512vnni; }
  bool has_amx_set() const { return has_avx512_vnni_set() && amx_usable; }
  std::string describe() const;  // "AVX2 FMA F16C AVX512F ..."
};

const CpuFeatures& cpu_features();

}  // namespace inferd::kernels

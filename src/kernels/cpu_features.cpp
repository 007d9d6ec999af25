#include "kernels/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace inferd::kernels {
namespace {

// Whether the OS lets this process use AMX tiles: XCR0 must have the tile config and tile data
// state enabled (bits 17 and 18), and Linux wants each process to ask for the tile data first
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); the grant covers all its threads.
bool request_amx_tiles() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !((ecx >> 27) & 1)) return false;  // OSXSAVE
  unsigned xcr0_low = 0, xcr0_high = 0;
  asm volatile("xgetbv" : "=a"(xcr0_low), "=d"(xcr0_high) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);
  if ((xcr0_low & kTileState) != kTileState) return false;
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr int kArchReqXcompPerm = 0x1023;
  constexpr int kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  __builtin_cpu_init();
  // GCC's checks include the OS having enabled the AVX / AVX-512 register state (XCR0).
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    // The vendor string's 12 bytes lie in ebx, edx, ecx.
    f.intel = ebx == 0x756e6547 && edx == 0x49656e69 && ecx == 0x6c65746e;  // "GenuineIntel"
  }
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) f.f16c = (ecx >> 29) & 1;
  if (f.avx512f && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512bf16 = (eax >> 5) & 1;
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.amx_bf16 = (edx >> 22) & 1;
    f.amx_int8 = (edx >> 25) & 1;
    const bool amx_tile = (edx >> 24) & 1;
    f.amx_usable = amx_tile && f.amx_int8 && request_amx_tiles();
  }
  f.f16c = f.f16c && f.avx2;  // F16C is only useful to us together with the AVX state
  return f;
}

}  // namespace

std::string CpuFeatures::describe() const {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!out.empty()) out += ' ';
    out += name;
  };
  add(avx2, "AVX2");
  add(fma, "FMA");
  add(f16c, "F16C");
  add(avx512f, "AVX512F");
  add(avx512bw, "AVX512BW");
  add(avx512vl, "AVX512VL");
  add(avx512vnni, "AVX512_VNNI");
  add(avx512bf16, "AVX512_BF16");
  add(amx_int8, "AMX_INT8");
  add(amx_bf16, "AMX_BF16");
  return out.empty() ? "none" : out;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace inferd::kernels

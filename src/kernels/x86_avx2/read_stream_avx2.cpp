// AVX2 read kernel: 128 bytes per iteration into four 256-bit sums of 64-bit lanes, the lines
// kReadPrefetchBytes ahead prefetched (in smoke checks on a loaded AMD EPYC, a few percent more
// than the hardware prefetchers alone; 512-768 bytes did best of 256-2048).
#include <immintrin.h>

#include "kernels/read_stream.h"

namespace inferd::kernels::avx2 {

uint64_t read_stream(const uint8_t* p, size_t bytes) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 128 <= bytes; i += 128) {
    // A prefetch past the end of the range is harmless: prefetches never fault.
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadPrefetchBytes), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kReadPrefetchBytes + 64), _MM_HINT_T0);
    const auto* v = reinterpret_cast<const __m256i*>(p + i);
    s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(v));
    s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(v + 1));
    s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(v + 2));
    s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(v + 3));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  alignas(32) uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), s);
  return lanes[0] + lanes[1] + lanes[2] + lanes[3] + detail::read_stream_tail(p + i, bytes - i);
}

}  // namespace inferd::kernels::avx2

// AVX-512 read kernel: 256 bytes per iteration into four 512-bit sums of 64-bit lanes, the lines
// kReadPrefetchBytes ahead prefetched, as the AVX2 kernel.
#include <immintrin.h>

#include "kernels/read_stream.h"

// GCC 12's _mm512_extracti64x4_epi64 starts from an undefined vector that its own
// -Wuninitialized then reports; the value is never read.
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace inferd::kernels::avx512 {

uint64_t read_stream(const uint8_t* p, size_t bytes) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  size_t i = 0;
  for (; i + 256 <= bytes; i += 256) {
    const uint8_t* q = p + i;
    for (size_t line = 0; line < 256; line += 64) {  // prefetches never fault past the end
      _mm_prefetch(reinterpret_cast<const char*>(q + kReadPrefetchBytes + line), _MM_HINT_T0);
    }
    s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(q));
    s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(q + 64));
    s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(q + 128));
    s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(q + 192));
  }
  const __m512i s = _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3));
  // The lanes are summed as unsigned words, which wrap: GCC 12's _mm512_reduce_add_epi64 adds
  // them as signed long long, an overflow UBSan reports.
  alignas(64) uint64_t lanes[8];
  _mm512_store_si512(lanes, s);
  uint64_t sum = 0;
  for (const uint64_t lane : lanes) sum += lane;
  return sum + detail::read_stream_tail(p + i, bytes - i);
}

}  // namespace inferd::kernels::avx512

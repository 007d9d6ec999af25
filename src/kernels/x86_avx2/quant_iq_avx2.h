// AVX2 row dots of the 1-3-bit i-quants with Q8_K activations; same contracts as
// kernels/ref/quant_iq_ref.h, and the same bits: each super-block's integer sum is exact, and
// the floats are combined in the reference's order.
#pragma once

#include <cstdint>

namespace inferd::kernels::avx2 {

float dot_iq2_xxs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq2_xs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq2_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq3_xxs_q8_k(int64_t n, const void* w, const void* a);
float dot_iq3_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq1_s_q8_k(int64_t n, const void* w, const void* a);
float dot_iq1_m_q8_k(int64_t n, const void* w, const void* a);

}  // namespace inferd::kernels::avx2

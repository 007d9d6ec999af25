// AVX2 + FMA element-wise activation kernels.
#pragma once

#include <cstdint>

namespace inferd::kernels::avx2 {

// a[i] = silu(a[i]) * b[i]
void silu_mul(float* a, const float* b, int64_t n);

}  // namespace inferd::kernels::avx2

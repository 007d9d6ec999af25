// The coefficients of tanh's odd Taylor series, shared by the SIMD tanh of every ISA
// (x86_avx2/exp_avx2.h, x86_avx512/exp_avx512.h).
#pragma once

namespace inferd::kernels {

// tanh(z) = z + z^3 (c[4] + z^2 (c[3] + z^2 (c[2] + z^2 (c[1] + z^2 c[0])))) + O(z^13), Horner's
// order: the z^11 coefficient first. Below |z| = 1/4 the next term is under 6e-11 of the value.
inline constexpr float kTanhSeries[] = {-1382.0f / 155925, 62.0f / 2835, -17.0f / 315, 2.0f / 15,
                                        -1.0f / 3};
// Where the SIMD tanh switches from the series to (1 - exp(-2|z|)) / (1 + exp(-2|z|)).
inline constexpr float kTanhSeriesBelow = 0.25f;

}  // namespace inferd::kernels

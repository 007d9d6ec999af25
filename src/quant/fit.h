// Scale searches shared by the quantizers: each picks the scale (and min) of one group of values
// that minimises a weighted squared (or absolute) reconstruction error, by trying a small grid
// of candidate scales, solving the least-squares scale for each rounding, and keeping the best.
// The searches and their parameters are the ones llama.cpp's quantizers use (no importance
// matrix): files made with them match llama-quantize's in size and quality.
#pragma once

#include <cmath>
#include <cstdint>

namespace inferd::quant {

// Groups whose largest magnitude is below this are stored as zeros.
constexpr float kTinyGroup = 1e-15f;

// Nearest integer, ties to even (the FPU's default rounding).
inline int round_int(float v) {
  return static_cast<int>(std::nearbyint(v));
}

// Symmetric levels q in [-nmax, nmax - 1], value ~ scale * q, error weighted by x^2. Tries 19
// inverse scales around nmax / max|x| and keeps the rounding whose least-squares scale explains
// the most of x. Writes q + nmax to levels; returns the scale (0 for an all-zero group).
float fit_symmetric(int n, int nmax, const float* x, int8_t* levels);

// Symmetric levels in [-nmax, nmax - 1] with error weighted by x^2, improved one value at a
// time: each value moves to the level that the scale fitted without it would give it, while that
// lowers the error (up to 5 passes). Writes q + nmax; returns the scale.
float fit_symmetric_refined(int n, int nmax, const float* x, int8_t* levels);

// Asymmetric levels q in [0, nmax], value ~ scale * q - min with min >= 0, error weighted by
// `weights` (squared, or absolute with `absolute_error`). Tries nstep + 1 inverse scales
// (nmax + rmin + rdelta * i) / (max - min) and fits scale and min by weighted least squares for
// each rounding; `min` starts as the group's minimum and follows the best fit found so far.
// Writes the levels; returns the scale and stores the min (>= 0) in *min_out.
float fit_with_min(int n, int nmax, const float* x, const float* weights, uint8_t* levels,
                   float* min_out, float rmin, float rdelta, int nstep, bool absolute_error);

// The IQ4 grid (kIq4Values): the index of the level nearest to v (levels sorted ascending).
int nearest_iq4_level(float v);

// The scale of one group of n values on the IQ4 grid, error weighted by x^2: starts from
// max|x| on the extreme level, refits by least squares, then tries 2 * ntry + 1 more inverse
// scales (ntry + level0 offset steps). Returns 0 for an all-zero group.
float fit_iq4(int n, const float* x, int ntry);

}  // namespace inferd::quant

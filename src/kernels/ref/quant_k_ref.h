// Scalar reference kernels for the weight types of downloaded GGUF files beyond Q4_0/Q4_1/Q8_0:
// the 32-wide Q5_0, Q5_1, IQ4_NL and MXFP4, and the 256-wide k-quants Q2_K..Q6_K and IQ4_XS with
// their activation format Q8_K. Dequantization gives the same floats, bit for bit, as gguf-py's
// numpy code (the same float operations in the same order); the dots sum integers per (sub-)block
// and scale once, as SIMD kernels do, and are the definition of correct for them.
#pragma once

#include <cstdint>

namespace inferd::kernels::ref {

// Activations of the k-quants: per 256 values a float d = 1 / (-127 / m), m the value of
// largest magnitude (the first one), int8 q = nearest(x * -127 / m) (so m itself gives -127),
// and the sums of each 16 q.
void quantize_row_q8_k(const float* x, void* out, int64_t n);
void dequantize_row_q8_k(const void* row, float* out, int64_t n);

float dot_q5_0_q8_0(int64_t n, const void* w, const void* a);
float dot_q5_1_q8_1(int64_t n, const void* w, const void* a);
float dot_iq4_nl_q8_0(int64_t n, const void* w, const void* a);
float dot_mxfp4_q8_0(int64_t n, const void* w, const void* a);
float dot_q2_k_q8_k(int64_t n, const void* w, const void* a);
float dot_q3_k_q8_k(int64_t n, const void* w, const void* a);
float dot_q4_k_q8_k(int64_t n, const void* w, const void* a);
float dot_q5_k_q8_k(int64_t n, const void* w, const void* a);
float dot_q6_k_q8_k(int64_t n, const void* w, const void* a);
float dot_iq4_xs_q8_k(int64_t n, const void* w, const void* a);

void dequantize_row_q5_0(const void* row, float* out, int64_t n);
void dequantize_row_q5_1(const void* row, float* out, int64_t n);
void dequantize_row_iq4_nl(const void* row, float* out, int64_t n);
void dequantize_row_mxfp4(const void* row, float* out, int64_t n);
void dequantize_row_q2_k(const void* row, float* out, int64_t n);
void dequantize_row_q3_k(const void* row, float* out, int64_t n);
void dequantize_row_q4_k(const void* row, float* out, int64_t n);
void dequantize_row_q5_k(const void* row, float* out, int64_t n);
void dequantize_row_q6_k(const void* row, float* out, int64_t n);
void dequantize_row_iq4_xs(const void* row, float* out, int64_t n);

}  // namespace inferd::kernels::ref

#include "quant/quantize.h"

#include <cstring>

#include "tensor/half.h"

namespace inferd::quant {
namespace {

void to_f32(const float* x, void* out, int64_t n) {
  std::memcpy(out, x, static_cast<size_t>(n) * sizeof(float));
}

void to_f16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void to_bf16(const float* x, void* out, int64_t n) {
  auto* y = static_cast<uint16_t*>(out);
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

}  // namespace

QuantizeFn quantizer_for(DType type) {
  switch (type) {
    case DType::F32:
      return to_f32;
    case DType::F16:
      return to_f16;
    case DType::BF16:
      return to_bf16;
    case DType::Q4_0:
      return quantize_q4_0;
    case DType::Q4_1:
      return quantize_q4_1;
    case DType::Q5_0:
      return quantize_q5_0;
    case DType::Q5_1:
      return quantize_q5_1;
    case DType::Q8_0:
      return quantize_q8_0;
    case DType::IQ4_NL:
      return quantize_iq4_nl;
    case DType::MXFP4:
      return quantize_mxfp4;
    case DType::Q2_K:
      return quantize_q2_k;
    case DType::Q3_K:
      return quantize_q3_k;
    case DType::Q4_K:
      return quantize_q4_k;
    case DType::Q5_K:
      return quantize_q5_k;
    case DType::Q6_K:
      return quantize_q6_k;
    case DType::IQ4_XS:
      return quantize_iq4_xs;
    default:
      return nullptr;
  }
}

}  // namespace inferd::quant

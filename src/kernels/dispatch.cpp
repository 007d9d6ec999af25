// Chooses the kernel table once: the best ISA this CPU supports, unless INFERD_ISA names one.
#include <cstdlib>

#include "kernels/cpu_features.h"
#include "kernels/kernels.h"
#include "kernels/read_stream.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/delta_net_ref.h"
#include "kernels/ref/gemm_ref.h"
#include "kernels/ref/quant_iq_ref.h"
#include "kernels/ref/quant_k_ref.h"
#include "kernels/ref/quant_ref.h"
#include "kernels/x86_amx/gemm_amx.h"
#include "kernels/x86_amx/gemm_amx_bf16.h"
#include "kernels/x86_avx2/attention_avx2.h"
#include "kernels/x86_avx2/delta_net_avx2.h"
#include "kernels/x86_avx2/gemm_avx2.h"
#include "kernels/x86_avx2/ops_avx2.h"
#include "kernels/x86_avx2/quant_avx2.h"
#include "kernels/x86_avx2/quant_iq_avx2.h"
#include "kernels/x86_avx512/attention_avx512.h"
#include "kernels/x86_avx512/bf16_avx512.h"
#include "kernels/x86_avx512/delta_net_avx512.h"
#include "kernels/x86_avx512/gemm_avx512.h"
#include "kernels/x86_avx512/iq_tile_avx512.h"
#include "kernels/x86_avx512/ops_avx512.h"
#include "util/error.h"

namespace inferd::kernels {

const WeightKernels* KernelTable::for_weight(DType type) const {
  const WeightKernels* k = nullptr;
  switch (type) {
    case DType::Q4_0:
      k = &q4_0;
      break;
    case DType::Q4_1:
      k = &q4_1;
      break;
    case DType::Q8_0:
      k = &q8_0;
      break;
    case DType::F16:
      k = &f16;
      break;
    case DType::BF16:
      k = &bf16;
      break;
    case DType::F32:
      k = &f32;
      break;
    case DType::Q5_0:
      k = &q5_0;
      break;
    case DType::Q5_1:
      k = &q5_1;
      break;
    case DType::IQ4_NL:
      k = &iq4_nl;
      break;
    case DType::Q2_K:
      k = &q2_k;
      break;
    case DType::Q3_K:
      k = &q3_k;
      break;
    case DType::Q4_K:
      k = &q4_k;
      break;
    case DType::Q5_K:
      k = &q5_k;
      break;
    case DType::Q6_K:
      k = &q6_k;
      break;
    case DType::IQ4_XS:
      k = &iq4_xs;
      break;
    case DType::MXFP4:
      k = &mxfp4;
      break;
    case DType::IQ2_XXS:
      k = &iq2_xxs;
      break;
    case DType::IQ2_XS:
      k = &iq2_xs;
      break;
    case DType::IQ2_S:
      k = &iq2_s;
      break;
    case DType::IQ3_XXS:
      k = &iq3_xxs;
      break;
    case DType::IQ3_S:
      k = &iq3_s;
      break;
    case DType::IQ1_S:
      k = &iq1_s;
      break;
    case DType::IQ1_M:
      k = &iq1_m;
      break;
    default:
      return nullptr;
  }
  return k->dot != nullptr ? k : nullptr;
}

const KernelTable& reference_kernels() {
  static const KernelTable table = [] {
    KernelTable t;
    t.isa = "ref";
    t.q4_0 = {DType::Q8_0, ref::quantize_row_q8_0, ref::dot_q4_0_q8_0, ref::dequantize_row_q4_0};
    t.q4_1 = {DType::Q8_1, ref::quantize_row_q8_1, ref::dot_q4_1_q8_1, ref::dequantize_row_q4_1};
    t.q8_0 = {DType::Q8_0, ref::quantize_row_q8_0, ref::dot_q8_0_q8_0, ref::dequantize_row_q8_0};
    t.f16 = {DType::F16, ref::quantize_row_f16, ref::dot_f16_f16, ref::dequantize_row_f16};
    t.bf16 = {DType::BF16, ref::quantize_row_bf16, ref::dot_bf16_bf16, ref::dequantize_row_bf16};
    t.f32 = {DType::F32, ref::quantize_row_f32, ref::dot_f32_f32, ref::dequantize_row_f32};
    t.q5_0 = {DType::Q8_0, ref::quantize_row_q8_0, ref::dot_q5_0_q8_0, ref::dequantize_row_q5_0};
    t.q5_1 = {DType::Q8_1, ref::quantize_row_q8_1, ref::dot_q5_1_q8_1, ref::dequantize_row_q5_1};
    t.iq4_nl = {DType::Q8_0, ref::quantize_row_q8_0, ref::dot_iq4_nl_q8_0,
                ref::dequantize_row_iq4_nl};
    t.q2_k = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_q2_k_q8_k, ref::dequantize_row_q2_k};
    t.q3_k = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_q3_k_q8_k, ref::dequantize_row_q3_k};
    t.q4_k = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_q4_k_q8_k, ref::dequantize_row_q4_k};
    t.q5_k = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_q5_k_q8_k, ref::dequantize_row_q5_k};
    t.q6_k = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_q6_k_q8_k, ref::dequantize_row_q6_k};
    t.iq4_xs = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_iq4_xs_q8_k,
                ref::dequantize_row_iq4_xs};
    t.mxfp4 = {DType::Q8_0, ref::quantize_row_q8_0, ref::dot_mxfp4_q8_0, ref::dequantize_row_mxfp4};
    t.iq2_xxs = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_iq2_xxs_q8_k,
                 ref::dequantize_row_iq2_xxs};
    t.iq2_xs = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_iq2_xs_q8_k,
                ref::dequantize_row_iq2_xs};
    t.iq2_s = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_iq2_s_q8_k, ref::dequantize_row_iq2_s};
    t.iq3_xxs = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_iq3_xxs_q8_k,
                 ref::dequantize_row_iq3_xxs};
    t.iq3_s = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_iq3_s_q8_k, ref::dequantize_row_iq3_s};
    t.iq1_s = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_iq1_s_q8_k, ref::dequantize_row_iq1_s};
    t.iq1_m = {DType::Q8_K, ref::quantize_row_q8_k, ref::dot_iq1_m_q8_k, ref::dequantize_row_iq1_m};
    t.iq_tile = ref::iq_tile_gemm;
    t.attention = ref::attention_kernels();
    t.silu_mul = ref::silu_mul;
    t.lora_up = ref::lora_up;
    t.gelu_mul = ref::gelu_mul;
    t.swiglu_oai = ref::swiglu_oai;
    t.softcap = ref::softcap;
    t.argmax = ref::argmax;
    t.mask_logits = ref::mask_logits;
    t.read_stream = ref::read_stream;
    t.packed = ref::packed_kernels();
    t.delta_net = ref::delta_net_kernels();
    return t;
  }();
  return table;
}

// AVX2 + FMA + F16C: int8 dot products through maddubs; dequantization stays scalar
// (it runs once per embedding row, not in the matmuls).
static const KernelTable& avx2_kernels() {
  static const KernelTable table = [] {
    KernelTable t = reference_kernels();
    t.isa = "avx2";
    t.q4_0.quantize_activation = avx2::quantize_row_q8_0;
    t.q4_0.dot = avx2::dot_q4_0_q8_0;
    t.q4_1.quantize_activation = avx2::quantize_row_q8_1;
    t.q4_1.dot = avx2::dot_q4_1_q8_1;
    t.q8_0.quantize_activation = avx2::quantize_row_q8_0;
    t.q8_0.dot = avx2::dot_q8_0_q8_0;
    t.f16.dot = avx2::dot_f16_f16;
    t.bf16.dot = avx2::dot_bf16_bf16;
    t.f32.dot = avx2::dot_f32_f32;
    t.attention = avx2::attention_kernels();
    t.silu_mul = avx2::silu_mul;
    t.lora_up = avx2::lora_up;
    t.gelu_mul = avx2::gelu_mul;
    t.swiglu_oai = avx2::swiglu_oai;
    t.softcap = avx2::softcap;
    t.argmax = avx2::argmax;
    t.mask_logits = avx2::mask_logits;
    t.read_stream = avx2::read_stream;
    t.f16.quantize_activation = avx2::quantize_row_f16;
    t.packed = avx2::packed_kernels();
    t.delta_net = avx2::delta_net_kernels();
    for (WeightKernels* k : {&t.q2_k, &t.q3_k, &t.q4_k, &t.q5_k, &t.q6_k, &t.iq4_xs, &t.iq2_xxs,
                             &t.iq2_xs, &t.iq2_s, &t.iq3_xxs, &t.iq3_s, &t.iq1_s, &t.iq1_m})
      k->quantize_activation = avx2::quantize_row_q8_k;
    t.iq2_xxs.dot = avx2::dot_iq2_xxs_q8_k;
    t.iq2_xs.dot = avx2::dot_iq2_xs_q8_k;
    t.iq2_s.dot = avx2::dot_iq2_s_q8_k;
    t.iq3_xxs.dot = avx2::dot_iq3_xxs_q8_k;
    t.iq3_s.dot = avx2::dot_iq3_s_q8_k;
    t.iq1_s.dot = avx2::dot_iq1_s_q8_k;
    t.iq1_m.dot = avx2::dot_iq1_m_q8_k;
    t.iq_tile = avx2::iq_tile_gemm;
    return t;
  }();
  return table;
}

// AVX-512 F/BW/VL + VNNI for the packed int8 path, BF16 dot products where the CPU has
// AVX512_BF16; everything else as AVX2.
static const KernelTable& avx512_kernels() {
  static const KernelTable table = [] {
    KernelTable t = avx2_kernels();
    t.isa = "avx512";
    t.packed = avx512::packed_kernels(cpu_features().intel);
    t.attention = avx512::attention_kernels();
    t.silu_mul = avx512::silu_mul;
    t.lora_up = avx512::lora_up;
    t.gelu_mul = avx512::gelu_mul;
    t.swiglu_oai = avx512::swiglu_oai;
    t.softcap = avx512::softcap;
    t.argmax = avx512::argmax;
    t.mask_logits = avx512::mask_logits;
    t.read_stream = avx512::read_stream;
    t.delta_net = avx512::delta_net_kernels();
    t.iq_tile = avx512::iq_tile_gemm;
    t.bf16.quantize_activation = avx512::quantize_row_bf16;
    if (cpu_features().avx512bf16) t.bf16.dot = avx512::dot_bf16_bf16;
    return t;
  }();
  return table;
}

// AMX tiles for the group GEMMs of batches: int8 tiles from 6 tokens, and where the CPU has
// AMX-BF16 the bf16 route for the rows of long prompts; everything else as AVX-512.
static const KernelTable& amx_kernels() {
  static const KernelTable table = [] {
    KernelTable t = avx512_kernels();
    t.isa = "amx";
    t.packed = amx::packed_kernels(avx512_kernels().packed);
    if (cpu_features().amx_bf16 && cpu_features().avx512bf16) {
      t.packed.bf16_route = true;
      t.packed.bf16_act = avx512::quantize_row_bf16;
      amx::set_bf16_group_kernels(t.packed);
    }
    return t;
  }();
  return table;
}

std::vector<const KernelTable*> available_kernels() {
  std::vector<const KernelTable*> tables{&reference_kernels()};
  const CpuFeatures& cpu = cpu_features();
  if (cpu.has_avx2_set()) tables.push_back(&avx2_kernels());
  if (cpu.has_avx2_set() && cpu.has_avx512_vnni_set()) tables.push_back(&avx512_kernels());
  if (cpu.has_avx2_set() && cpu.has_amx_set()) tables.push_back(&amx_kernels());
  return tables;
}

const KernelTable& active_kernels() {
  static const KernelTable* chosen = [] {
    auto tables = available_kernels();
    const char* forced = std::getenv("INFERD_ISA");
    if (forced == nullptr || *forced == '\0') return tables.back();
    std::string choices;
    for (const KernelTable* t : tables) {
      if (t->isa == forced) return t;
      choices += (choices.empty() ? "" : ", ") + std::string(t->isa);
    }
    fail("INFERD_ISA={} is not available on this CPU (choices: {})", forced, choices);
  }();
  return *chosen;
}

}  // namespace inferd::kernels

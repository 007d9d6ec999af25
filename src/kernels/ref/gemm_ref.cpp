#include "kernels/ref/gemm_ref.h"

#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/ref/quant_k_ref.h"
#include "kernels/ref/quant_ref.h"
#include "tensor/half.h"
#include "tensor/quant_blocks.h"

namespace inferd::kernels::ref {
namespace {

float round_to_fp16(float x) {
  return fp16_to_fp32(fp32_to_fp16(x));
}

// ActQ8Block's offsets from its half sums.
void set_offsets(ActQ8Block& block) {
  block.offset32[0] = -32 * block.half_sum[0];
  block.offset32[1] = -32 * block.half_sum[1];
  block.offset128 = -128 * block.sum();
  block.unused = 0;
}

void quantize_act_q8(const float* x, ActQ8Block* out, int64_t n, int64_t out_stride) {
  for (int64_t b = 0; b < n / kPackCols; ++b) {
    ActQ8Block& block = out[b * out_stride];
    const float* xb = x + b * kPackCols;
    float amax = 0;
    for (int j = 0; j < kPackCols; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f;
    const float inv = d != 0 ? 1.0f / d : 0.0f;
    int half_sum[2] = {0, 0};
    for (int j = 0; j < kPackCols; ++j) {
      const int q = static_cast<int>(std::nearbyint(xb[j] * inv));
      block.qs[j] = static_cast<int8_t>(q);
      half_sum[j / 16] += q;
    }
    const int sum = half_sum[0] + half_sum[1];
    block.half_sum[0] = static_cast<int16_t>(half_sum[0]);
    block.half_sum[1] = static_cast<int16_t>(half_sum[1]);
    set_offsets(block);
    block.d = round_to_fp16(d);
    block.s = round_to_fp16(d * static_cast<float>(sum));
    block.d_sum = block.d * static_cast<float>(sum);
  }
}

// Q8_K rounding (quantize_row_q8_k, the definition) spread over the 8 blocks of each 256 values.
void quantize_act_q8k(const float* x, ActQ8Block* out, int64_t n, int64_t out_stride) {
  for (int64_t sb = 0; sb < n / kPackSuperCols; ++sb) {
    BlockQ8_K q8k;
    quantize_row_q8_k(x + sb * kPackSuperCols, &q8k, kPackSuperCols);
    for (int j = 0; j < kSubBlocks; ++j) {
      ActQ8Block& block = out[(sb * kSubBlocks + j) * out_stride];
      std::memcpy(block.qs, q8k.qs + j * kPackCols, kPackCols);
      block.half_sum[0] = q8k.bsums[2 * j];
      block.half_sum[1] = q8k.bsums[2 * j + 1];
      set_offsets(block);
      const auto sum = static_cast<float>(block.sum());
      block.d = q8k.d;
      block.s = round_to_fp16(q8k.d * sum);
      block.d_sum = q8k.d * sum;
    }
  }
}

// The values of the low and high nibble of a byte of qs[c] (columns 8c + k and 8c + 4 + k),
// with their fifth bits (bits 2c and 2c + 1 of `high`) where the layout has them.
struct NibblePair {
  int first, second;
};
NibblePair nibble_pair(uint8_t byte, uint8_t high, int c) {
  const int low_fifth = (high >> (2 * c)) & 1, high_fifth = (high >> (2 * c + 1)) & 1;
  return {(byte & 0x0F) | low_fifth << 4, (byte >> 4) | high_fifth << 4};
}
// Q6_K's two 6-bit values of the ql byte `low` of qs[c]'s position (PackedQ6KBlock): the top
// two bits of each from the qh byte at that position, its low nibble for even c, else its high.
NibblePair q6k_pair(uint8_t low, uint8_t qh, int c) {
  const int top = (qh >> (4 * (c % 2))) & 0x0F;
  return {(low & 0x0F) | (top & 3) << 4, (low >> 4) | (top >> 2) << 4};
}

// PackedQ4Block (Q4_0, Q4_1) or PackedQ5_1Block, w = d * q + m; `offset_sum` picks the
// activation sum that the weights' offset m multiplies.
template <float ActQ8Block::*offset_sum, typename Block = PackedQ4Block>
void gemm_q4_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                   int64_t n_tokens, float* y, int64_t y_stride) {
  constexpr bool kFiveBits = std::is_same_v<Block, PackedQ5_1Block>;
  const auto* w = reinterpret_cast<const Block*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const ActQ8Block& a = act[b * act_stride + t];
        int32_t isum = 0;
        for (int c = 0; c < 4; ++c) {
          for (int k = 0; k < 4; ++k) {
            uint8_t high = 0;
            if constexpr (kFiveBits) high = w[b].qh[r * 4 + k];
            const auto [first, second] = nibble_pair(w[b].qs[c][r * 4 + k], high, c);
            isum += first * a.qs[8 * c + k] + second * a.qs[8 * c + 4 + k];
          }
        }
        acc += static_cast<float>(isum) * (fp16_to_fp32(w[b].d[r]) * a.d);
        acc += fp16_to_fp32(w[b].m[r]) * (a.*offset_sum);
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// Q4_K: the Q4 sum of each 32-column sub-block, scaled by d * scale; the min folds through
// the activation's exact d * sum(q), as llama.cpp folds it through Q8_K's block sums.
void gemm_q4k_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                    int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedQ4KBlock*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const float d = fp16_to_fp32(w[b].d[r]), dmin = fp16_to_fp32(w[b].dmin[r]);
        for (int j = 0; j < kSubBlocks; ++j) {
          const ActQ8Block& a = act[(b * kSubBlocks + j) * act_stride + t];
          int32_t isum = 0;
          for (int c = 0; c < 4; ++c) {
            for (int k = 0; k < 4; ++k) {
              const uint8_t byte = w[b].qs[j][c][r * 4 + k];
              isum += (byte & 0x0F) * a.qs[8 * c + k] + (byte >> 4) * a.qs[8 * c + 4 + k];
            }
          }
          const float scale = d * static_cast<float>(w[b].scales[j][r]);
          const float min = dmin * static_cast<float>(w[b].mins[j][r]);
          acc += static_cast<float>(isum) * (scale * a.d);
          acc -= min * a.d_sum;
        }
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// Q5_K: Q4_K with the fifth bit of each q from qh.
void gemm_q5k_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                    int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedQ5KBlock*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const float d = fp16_to_fp32(w[b].d[r]), dmin = fp16_to_fp32(w[b].dmin[r]);
        for (int j = 0; j < kSubBlocks; ++j) {
          const ActQ8Block& a = act[(b * kSubBlocks + j) * act_stride + t];
          int32_t isum = 0;
          for (int c = 0; c < 4; ++c) {
            for (int k = 0; k < 4; ++k) {
              const auto [first, second] =
                  nibble_pair(w[b].sub[j].qs[c][r * 4 + k], w[b].sub[j].qh[r * 4 + k], c);
              isum += first * a.qs[8 * c + k] + second * a.qs[8 * c + 4 + k];
            }
          }
          const float scale = d * static_cast<float>(w[b].scales[j][r]);
          const float min = dmin * static_cast<float>(w[b].mins[j][r]);
          acc += static_cast<float>(isum) * (scale * a.d);
          acc -= min * a.d_sum;
        }
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// IQ4_XS: the table values of the nibbles, summed in integers per 32 columns.
void gemm_iq4xs_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act,
                      int64_t act_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedIQ4XSBlock*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const float d = fp16_to_fp32(w[b].d[r]);
        for (int j = 0; j < kSubBlocks; ++j) {
          const ActQ8Block& a = act[(b * kSubBlocks + j) * act_stride + t];
          int32_t isum = 0;
          for (int c = 0; c < 4; ++c) {
            for (int k = 0; k < 4; ++k) {
              const uint8_t byte = w[b].qs[j][c][r * 4 + k];
              isum += kIq4Values[byte & 0x0F] * a.qs[8 * c + k] +
                      kIq4Values[byte >> 4] * a.qs[8 * c + 4 + k];
            }
          }
          acc += static_cast<float>(isum) * (d * static_cast<float>(w[b].scales[j][r]) * a.d);
        }
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// MXFP4: the table values of the nibbles summed in integers per block, scaled by the activation's
// d times the row's power-of-two scale (as llama.cpp's MXFP4 x Q8_0 dot).
void gemm_mxfp4_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act,
                      int64_t act_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedMXFP4Block*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const ActQ8Block& a = act[b * act_stride + t];
        int32_t isum = 0;
        for (int c = 0; c < 4; ++c) {
          for (int k = 0; k < 4; ++k) {
            const uint8_t byte = w[b].qs[c][r * 4 + k];
            isum += kMxfp4Values[byte & 0x0F] * a.qs[8 * c + k] +
                    kMxfp4Values[byte >> 4] * a.qs[8 * c + 4 + k];
          }
        }
        acc += static_cast<float>(isum) * (e8m0_to_fp32_half(w[b].e[r]) * a.d);
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// Q6_K: per 16-column sub-block, d * scale * (sum(q * a) - 32 * sum(a)), the offset exact in
// integers through the activation's half sums.
void gemm_q6k_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                    int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedQ6KBlock*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const float d = fp16_to_fp32(w[b].d[r]);
        for (int j = 0; j < kSubBlocks; ++j) {
          const ActQ8Block& a = act[(b * kSubBlocks + j) * act_stride + t];
          int32_t isum[2] = {0, 0};
          for (int c = 0; c < 4; ++c) {
            for (int k = 0; k < 4; ++k) {
              const auto [first, second] =
                  q6k_pair(w[b].sub[j].ql[c][r * 4 + k], w[b].sub[j].qh[c / 2][r * 4 + k], c);
              isum[c / 2] += first * a.qs[8 * c + k] + second * a.qs[8 * c + 4 + k];
            }
          }
          for (int h = 0; h < 2; ++h) {
            const float scale = d * static_cast<float>(w[b].scales[2 * j + h][r]);
            acc += static_cast<float>(isum[h] - 32 * a.half_sum[h]) * (scale * a.d);
          }
        }
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// Q3_K: per 16-column sub-block, d * scale * (sum(v * a) - 4 * sum(a)) with v = q + 4, the
// offset exact in integers through the activation's half sums (as Q6_K's).
void gemm_q3k_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                    int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedQ3KBlock*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const float d = fp16_to_fp32(w[b].d[r]);
        for (int j = 0; j < kSubBlocks; ++j) {
          const ActQ8Block& a = act[(b * kSubBlocks + j) * act_stride + t];
          const auto& sub = w[b].sub[j];
          for (int p = 0; p < 2; ++p) {
            int32_t isum = 0;
            for (int i = 0; i < 4; ++i) {
              for (int k = 0; k < 4; ++k) {
                const int g = 4 * p + i;  // the 4-column group within the 32 columns
                const int v =
                    ((sub.ql[p][r * 4 + k] >> (2 * i)) & 3) | ((sub.qh[r * 4 + k] >> g) & 1) << 2;
                isum += v * a.qs[4 * g + k];
              }
            }
            const float scale = d * static_cast<float>(w[b].scales[2 * j + p][r]);
            acc += static_cast<float>(isum - 4 * a.half_sum[p]) * (scale * a.d);
          }
        }
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// Q2_K: per 16-column sub-block, d * scale * sum(q * a) - dmin * min * sum(a): the mins fold
// through the activation's half sums, in integers over the super-block as llama.cpp folds them
// through Q8_K's block sums.
void gemm_q2k_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act, int64_t act_stride,
                    int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedQ2KBlock*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        int32_t scaled = 0, mins = 0;
        for (int j = 0; j < kSubBlocks; ++j) {
          const ActQ8Block& a = act[(b * kSubBlocks + j) * act_stride + t];
          for (int p = 0; p < 2; ++p) {
            int32_t isum = 0;
            for (int i = 0; i < 4; ++i) {
              for (int k = 0; k < 4; ++k)
                isum += ((w[b].qs[j][p][r * 4 + k] >> (2 * i)) & 3) * a.qs[16 * p + 4 * i + k];
            }
            const uint8_t byte = w[b].scales[j][r][p];
            scaled += (byte & 0x0F) * isum;
            mins += (byte >> 4) * a.half_sum[p];
          }
        }
        // The 8 blocks of a super-block share the activation's d (Q8_K).
        const float a_d = act[b * kSubBlocks * act_stride + t].d;
        acc += static_cast<float>(scaled) * (fp16_to_fp32(w[b].d[r]) * a_d);
        acc -= static_cast<float>(mins) * (fp16_to_fp32(w[b].dmin[r]) * a_d);
      }
      y[t * y_stride + r] = acc;
    }
  }
}

void gemm_q8_0_group(const uint8_t* group, int64_t blocks, const ActQ8Block* act,
                     int64_t act_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedQ8Block*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        const ActQ8Block& a = act[b * act_stride + t];
        int32_t isum = 0;
        for (int c = 0; c < 8; ++c) {
          for (int k = 0; k < 4; ++k) isum += (w[b].qs[c][r * 4 + k] - 128) * a.qs[4 * c + k];
        }
        acc += static_cast<float>(isum) * (fp16_to_fp32(w[b].d[r]) * a.d);
      }
      y[t * y_stride + r] = acc;
    }
  }
}

void gemm_f16_group(const uint8_t* group, int64_t blocks, const float* x, int64_t x_stride,
                    int64_t n_tokens, float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const PackedF16Block*>(group);
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int r = 0; r < kPackRows; ++r) {
      float acc = 0;
      for (int64_t b = 0; b < blocks; ++b) {
        for (int k = 0; k < kPackCols; ++k)
          acc += fp16_to_fp32(w[b].w[k][r]) * x[t * x_stride + b * kPackCols + k];
      }
      y[t * y_stride + r] = acc;
    }
  }
}

// Weight (row r, column col) of a packed block, as the bf16 route dequantizes it: the format's
// value in float, computed in an order whose products are exact (d times a 4-8 bit scale has at
// most 19 significant bits, times a q of up to 5 bits at most 24), so each weight is rounded
// once, where the SIMD dequantizers round it too. Q6_K's (d * scale) * (q - 32) may need 25 bits:
// it is rounded at that product, in that order, by both.
// The nibble of column `col` (0..31) of row r in 32 columns laid out as PackedQ4Block's qs, and
// the position of its byte within qs[col / 8].
struct NibbleAt {
  int c, byte_index;
  bool high;
};
NibbleAt nibble_at(int r, int col) {
  return {col / 8, r * 4 + col % 4, col % 8 >= 4};
}
int nibble_value(const uint8_t (&qs)[4][64], const NibbleAt& at) {
  const uint8_t byte = qs[at.c][at.byte_index];
  return at.high ? byte >> 4 : byte & 0x0F;
}
// The 2-bit field of column `col` (0..15) of row r in 16 columns laid out as PackedQ3KBlock's
// ql[p] (Q2_K's qs[j][p] alike): bits 2k, 2k + 1 of byte 4r + col % 4, k = col / 4.
int two_bit_value(const uint8_t (&bits)[64], int r, int col) {
  return (bits[r * 4 + col % 4] >> (2 * (col / 4))) & 3;
}
float q4_weight(const PackedQ4Block& block, int r, int col) {
  const int q = nibble_value(block.qs, nibble_at(r, col));
  return fp16_to_fp32(block.d[r]) * static_cast<float>(q) + fp16_to_fp32(block.m[r]);
}
float q8_weight(const PackedQ8Block& block, int r, int col) {
  return fp16_to_fp32(block.d[r]) * static_cast<float>(block.qs[col / 4][r * 4 + col % 4] - 128);
}
float q4k_weight(const PackedQ4KBlock& block, int r, int col) {
  const int j = col / kPackCols;
  const int q = nibble_value(block.qs[j], nibble_at(r, col % kPackCols));
  const float scale = fp16_to_fp32(block.d[r]) * static_cast<float>(block.scales[j][r]);
  const float min = fp16_to_fp32(block.dmin[r]) * static_cast<float>(block.mins[j][r]);
  return scale * static_cast<float>(q) - min;
}
float q5k_weight(const PackedQ5KBlock& block, int r, int col) {
  const int j = col / kPackCols;
  const NibbleAt at = nibble_at(r, col % kPackCols);
  const auto [first, second] =
      nibble_pair(block.sub[j].qs[at.c][at.byte_index], block.sub[j].qh[at.byte_index], at.c);
  const int q = at.high ? second : first;
  const float scale = fp16_to_fp32(block.d[r]) * static_cast<float>(block.scales[j][r]);
  const float min = fp16_to_fp32(block.dmin[r]) * static_cast<float>(block.mins[j][r]);
  return scale * static_cast<float>(q) - min;
}
float q6k_weight(const PackedQ6KBlock& block, int r, int col) {
  const int j = col / kPackCols, within = col % kPackCols;
  const NibbleAt at = nibble_at(r, within);
  const auto [first, second] = q6k_pair(block.sub[j].ql[at.c][at.byte_index],
                                        block.sub[j].qh[at.c / 2][at.byte_index], at.c);
  const int q = at.high ? second : first;
  const float scale =
      fp16_to_fp32(block.d[r]) * static_cast<float>(block.scales[2 * j + within / 16][r]);
  return scale * static_cast<float>(q - 32);
}
float iq4xs_weight(const PackedIQ4XSBlock& block, int r, int col) {
  const int j = col / kPackCols;
  const int q = kIq4Values[nibble_value(block.qs[j], nibble_at(r, col % kPackCols))];
  return fp16_to_fp32(block.d[r]) * static_cast<float>(block.scales[j][r]) * static_cast<float>(q);
}
// Q3_K and Q2_K: 2-bit fields of 4-column groups g (PackedQ3KBlock's ql).
float q3k_weight(const PackedQ3KBlock& block, int r, int col) {
  const int j = col / kPackCols, g = col % kPackCols / 4, p = g / 4;
  const auto& sub = block.sub[j];
  const int v = two_bit_value(sub.ql[p], r, col % 16) | ((sub.qh[r * 4 + col % 4] >> g) & 1) << 2;
  const float scale = fp16_to_fp32(block.d[r]) * static_cast<float>(block.scales[2 * j + p][r]);
  return scale * static_cast<float>(v - 4);
}
float q2k_weight(const PackedQ2KBlock& block, int r, int col) {
  const int j = col / kPackCols, p = col % kPackCols / 16;
  const int q = two_bit_value(block.qs[j][p], r, col % 16);
  const uint8_t byte = block.scales[j][r][p];
  const float scale = fp16_to_fp32(block.d[r]) * static_cast<float>(byte & 0x0F);
  const float min = fp16_to_fp32(block.dmin[r]) * static_cast<float>(byte >> 4);
  return scale * static_cast<float>(q) - min;
}

// The bf16 route: weights rounded to bf16, times the bf16 activations (tiled as
// bf16_tile_offset says), summed in double. `blocks` counts the layout's blocks (32 or 256
// columns each).
template <typename Block, float (*weight)(const Block&, int, int)>
void gemm_bf16_group(const uint8_t* group, int64_t n_groups, int64_t blocks, const uint16_t* x,
                     int64_t x_stride, int64_t n_tokens, float* y, int64_t y_stride) {
  constexpr int kColumns = static_cast<int>(Block::kColumns);
  for (int64_t g = 0; g < n_groups; ++g) {
    const auto* w = reinterpret_cast<const Block*>(group) + g * blocks;
    for (int64_t t = 0; t < n_tokens; ++t) {
      for (int r = 0; r < kPackRows; ++r) {
        double acc = 0;
        for (int64_t b = 0; b < blocks; ++b) {
          for (int col = 0; col < kColumns; ++col) {
            const float wv = bf16_to_fp32(fp32_to_bf16(weight(w[b], r, col)));
            const uint16_t a = x[bf16_tile_offset(t, b * kColumns + col, x_stride)];
            acc += double(wv) * bf16_to_fp32(a);
          }
        }
        y[t * y_stride + g * kPackRows + r] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace

PackedKernels packed_kernels() {
  PackedKernels k{quantize_act_q8, gemm_q4_group<&ActQ8Block::d_sum>, gemm_q4_group<&ActQ8Block::s>,
                  gemm_q8_0_group, gemm_f16_group};
  // The bf16 route's definition; matmul takes it only in tables that turn bf16_route on.
  k.bf16_act = quantize_row_bf16;
  k.q4_bf16 = gemm_bf16_group<PackedQ4Block, q4_weight>;
  k.q8_0_bf16 = gemm_bf16_group<PackedQ8Block, q8_weight>;
  k.q4_k_bf16 = gemm_bf16_group<PackedQ4KBlock, q4k_weight>;
  k.q5_k_bf16 = gemm_bf16_group<PackedQ5KBlock, q5k_weight>;
  k.q6_k_bf16 = gemm_bf16_group<PackedQ6KBlock, q6k_weight>;
  k.iq4_xs_bf16 = gemm_bf16_group<PackedIQ4XSBlock, iq4xs_weight>;
  k.q3_k_bf16 = gemm_bf16_group<PackedQ3KBlock, q3k_weight>;
  k.q2_k_bf16 = gemm_bf16_group<PackedQ2KBlock, q2k_weight>;
  k.quantize_act_k = quantize_act_q8k;
  k.q5_1 = gemm_q4_group<&ActQ8Block::s, PackedQ5_1Block>;
  k.q4_k = gemm_q4k_group;
  k.q5_k = gemm_q5k_group;
  k.q6_k = gemm_q6k_group;
  k.q3_k = gemm_q3k_group;
  k.q2_k = gemm_q2k_group;
  k.iq4_xs = gemm_iq4xs_group;
  k.mxfp4 = gemm_mxfp4_group;
  return k;
}

}  // namespace inferd::kernels::ref

// AMX (tile) kernels for the packed int8 path: one TDPBSUD multiplies 16 tokens x 32 columns of
// activations by 32 columns x 16 rows of weights. Reached only through the dispatch table, and
// only after the OS has granted this process the tile state (cpu_features().amx_usable).
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::amx {

// Batches below this many tokens go to `few_tokens` (the VNNI kernels): a tile always computes
// 16 token rows, and one or two tokens are bound by memory, not by multiplies.
constexpr int64_t kMinTokens = 6;

// The packed kernels with Q4_0, Q4_1 and Q8_0 group GEMMs on tiles; the quantizer, the F16
// kernel and batches of fewer than kMinTokens tokens are `few_tokens`'.
PackedKernels packed_kernels(const PackedKernels& few_tokens);

}  // namespace inferd::kernels::amx

// AMX-BF16 group kernels for the bf16 route (kernels.h, PackedKernels: prompt tokens): a
// group's weights are dequantized to bf16 once per call and multiplied by the bf16 activations
// of every token with TDPBF16PS, the float sums staying in the tiles across the whole row.
// Reached only through the dispatch table, on CPUs with AMX-BF16 and AVX512_BF16.
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::amx {

// Sets the group kernels of the bf16 route (PackedKernels::q4_bf16 .. q2_k_bf16: every layout
// that has the route) to the AMX ones.
void set_bf16_group_kernels(PackedKernels& kernels);

}  // namespace inferd::kernels::amx

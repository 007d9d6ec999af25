// AVX-512 (F, BW, VL, VNNI) kernels for the packed path: one VNNI instruction multiplies
// 16 rows x 4 columns of int8 for one token. Reached only through the dispatch table.
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::avx512 {

// This ISA's packed-path kernels: the activation quantizer and one group kernel per format.
PackedKernels packed_kernels();

}  // namespace inferd::kernels::avx512

// AVX-512 (F, BW, VL, VNNI) kernels for the packed path: one VNNI instruction multiplies
// 16 rows x 4 columns of int8 for one token. Reached only through the dispatch table.
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::avx512 {

// This ISA's packed-path kernels: the activation quantizer and one group kernel per format.
// stream_one_token: a group kernel called for one token (decode) prefetches the weights 1 KiB
// ahead itself instead of leaving them to the hardware prefetcher (faster on Intel, slower on
// AMD: gemm_avx512.cpp); the results are the same bits either way.
PackedKernels packed_kernels(bool stream_one_token);

}  // namespace inferd::kernels::avx512

// AVX2 + FMA + F16C kernels for the packed path: each 64-byte packed chunk is taken as two
// halves of 8 rows; int8 products go through maddubs. Reached only through the dispatch table.
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::avx2 {

// This ISA's packed-path kernels: the activation quantizer and one group kernel per format.
PackedKernels packed_kernels();

}  // namespace inferd::kernels::avx2

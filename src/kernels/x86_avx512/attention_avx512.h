// AVX-512 attention primitives (see AttentionKernels in kernels/kernels.h): 16 keys or 16
// dimensions per vector; shapes that are not multiples of 16 go to the AVX2 versions.
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::avx512 {

AttentionKernels attention_kernels();

}  // namespace inferd::kernels::avx512

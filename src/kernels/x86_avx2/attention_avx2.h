// AVX2 + FMA + F16C attention primitives (see AttentionKernels in kernels/kernels.h).
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::avx2 {

AttentionKernels attention_kernels();

}  // namespace inferd::kernels::avx2

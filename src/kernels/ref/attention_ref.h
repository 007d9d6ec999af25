// Scalar reference for the attention primitives (kernels/kernels.h: AttentionKernels).
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::ref {

AttentionKernels attention_kernels();

}  // namespace inferd::kernels::ref

// Scalar reference for the packed path: int8 activation blocks and the 16-row group kernels.
// The SIMD versions must agree with these on every input (tests/unit/kernels_packed_test).
#pragma once

#include "kernels/kernels.h"

namespace inferd::kernels::ref {

// This ISA's packed-path kernels: the activation quantizer and one group kernel per format.
PackedKernels packed_kernels();

}  // namespace inferd::kernels::ref

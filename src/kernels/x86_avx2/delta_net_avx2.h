// AVX2 + FMA Gated DeltaNet kernels (kernels/delta_net.h), 8 lanes; any head size (a masked
// tail).
#pragma once

#include "kernels/delta_net.h"

namespace inferd::kernels::avx2 {

DeltaNetKernels delta_net_kernels();

}  // namespace inferd::kernels::avx2

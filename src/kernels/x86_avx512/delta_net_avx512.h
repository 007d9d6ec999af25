// AVX-512 Gated DeltaNet kernels (kernels/delta_net.h), 16 lanes; any head size (a masked tail).
#pragma once

#include "kernels/delta_net.h"

namespace inferd::kernels::avx512 {

DeltaNetKernels delta_net_kernels();

}  // namespace inferd::kernels::avx512

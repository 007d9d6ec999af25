// Scalar reference for the Gated DeltaNet kernels (kernels/delta_net.h: DeltaNetKernels): the
// recurrence exactly as written there, and the chunked form as plain loops.
#pragma once

#include "kernels/delta_net.h"

namespace inferd::kernels::ref {

DeltaNetKernels delta_net_kernels();

}  // namespace inferd::kernels::ref

// make_cuda_decoder (model/decoder.h) in a build without the CUDA executor (INFERD_CUDA off).
#include "cuda/device_info.h"
#include "model/decoder.h"
#include "util/error.h"

namespace inferd::model {

std::unique_ptr<Model> make_cuda_decoder(const gguf::GgufFile& file, const ModelOptions&,
                                         ArchSpec) {
  fail("{}: --device cuda: this inferd was built without CUDA (configure with -DINFERD_CUDA=ON "
       "where nvcc is installed)",
       file.name());
}

}  // namespace inferd::model

namespace inferd::cuda {

DeviceInfo probe_device() { fail("--device cuda: this inferd was built without CUDA"); }

}  // namespace inferd::cuda

// cuBLAS, opened at run time (dlopen) by the first CUDA executor rather than linked. Linking it
// loads libcublas and libcublasLt into every inferd process: about 200 MB of resident memory
// (82 MiB of libcublasLt's zero-filled data is touched as it loads, the rest is its code) and
// their relocation at every start, also in the processes that never use a GPU (every CPU run,
// every rank of a split model). The executor calls the five functions below, no others.
#pragma once

#include <cublas_v2.h>

namespace inferd::cuda {

struct CublasLibrary {
  // cublasGemmEx's C entry point (the header overloads the name in C++, with a legacy compute
  // type).
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void*, const void*, cudaDataType, int, const void*,
                                    cudaDataType, int, const void*, void*, cudaDataType, int,
                                    cublasComputeType_t, cublasGemmAlgo_t);
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  GemmEx gemm_ex = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
};

// The library of the cuBLAS major version inferd was built with (libcublas.so.N), opened on the
// first call and kept for the process (thread-safe). Looked up by the dynamic loader's search
// (LD_LIBRARY_PATH, the binary's run path, ld.so.cache), then in the CUDA toolkit's folder of
// the build. An inferd::Error that names the library and the loader's message when it cannot
// be opened or lacks one of the functions.
const CublasLibrary& cublas();

}  // namespace inferd::cuda

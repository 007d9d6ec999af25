#include "cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>

#include "util/error.h"

namespace inferd::cuda {
namespace {

// The toolkit's library folder of the build (CMake's CUDAToolkit_LIBRARY_DIR).
#ifndef INFERD_CUDA_LIBRARY_DIR
#define INFERD_CUDA_LIBRARY_DIR ""
#endif

std::string loader_error() {
  const char* message = dlerror();
  return message != nullptr ? message : "no message";
}

template <typename Function>
void bind(void* handle, const std::string& soname, const char* symbol, Function& out) {
  void* address = dlsym(handle, symbol);
  if (address == nullptr)
    fail("{} has no function {} ({}): a cuBLAS other than the one inferd was built with", soname,
         symbol, loader_error());
  out = reinterpret_cast<Function>(address);
}

CublasLibrary open_cublas() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* handle = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why = handle == nullptr ? loader_error() : "";
  const std::string folder = INFERD_CUDA_LIBRARY_DIR;
  if (handle == nullptr && !folder.empty()) {
    handle = dlopen((folder + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) why += "; " + loader_error();
  }
  if (handle == nullptr)
    fail(
        "the CUDA executor needs cuBLAS, and {} could not be loaded: {} (install the CUDA "
        "toolkit's cuBLAS {}, or put its folder on LD_LIBRARY_PATH)",
        soname, why, CUBLAS_VER_MAJOR);
  CublasLibrary lib;
  bind(handle, soname, "cublasCreate_v2", lib.create);
  bind(handle, soname, "cublasSetStream_v2", lib.set_stream);
  bind(handle, soname, "cublasGemmEx", lib.gemm_ex);
  bind(handle, soname, "cublasDestroy_v2", lib.destroy);
  bind(handle, soname, "cublasGetStatusString", lib.status_string);
  return lib;  // the handle stays open for the process: the executor's handles live in it
}

}  // namespace

const CublasLibrary& cublas() {
  // Opened once, under the guard of a function-local static (no lock after that); an open that
  // throws leaves it unset, so the next executor tries again and reports again.
  static const CublasLibrary library = open_cublas();
  return library;
}

}  // namespace inferd::cuda

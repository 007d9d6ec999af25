// The CUDA executor's cuBLAS, opened at run time (cuda/cublas_library.h): the build's soname
// opens and gives every function the executor calls. No device is needed for that.
#if INFERD_HAS_CUDA
#include "cuda/cublas_library.h"

#include <gtest/gtest.h>

#include <cstring>

TEST(CublasLibrary, OpensTheBuildsCublasWithEveryFunctionTheExecutorCalls) {
  const inferd::cuda::CublasLibrary& lib = inferd::cuda::cublas();
  EXPECT_NE(lib.create, nullptr);
  EXPECT_NE(lib.set_stream, nullptr);
  EXPECT_NE(lib.gemm_ex, nullptr);
  EXPECT_NE(lib.destroy, nullptr);
  ASSERT_NE(lib.status_string, nullptr);
  // A call into the library that needs no device: its own words for two statuses.
  const char* not_initialized = lib.status_string(CUBLAS_STATUS_NOT_INITIALIZED);
  const char* success = lib.status_string(CUBLAS_STATUS_SUCCESS);
  ASSERT_NE(not_initialized, nullptr);
  ASSERT_NE(success, nullptr);
  EXPECT_GT(std::strlen(not_initialized), 0u);
  EXPECT_STRNE(not_initialized, success);
  EXPECT_EQ(&lib, &inferd::cuda::cublas());  // opened once
}
#endif

// libFuzzer target for the GGUF reader: any byte string must parse or give inferd::Error,
// and a parsed file's tables must be readable without touching bytes outside the input.
#include <cstddef>
#include <cstdint>

#include "gguf/gguf.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto file = inferd::gguf::GgufFile::parse({data, size}, "fuzz");
    volatile uint64_t sink = 0;
    for (const auto& [key, value] : file.metadata())
      sink = sink + key.size() + value.to_string().size();
    for (const auto& tensor : file.tensors()) {
      if (tensor.num_bytes > 0) sink = sink + tensor.data[0] + tensor.data[tensor.num_bytes - 1];
    }
    (void)file.get_string("general.architecture");
  } catch (const inferd::Error&) {
    // Rejected cleanly: the expected outcome for most inputs.
  }
  return 0;
}

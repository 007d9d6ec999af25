// For the engine's tests of pipeline and data parallelism, whose ranks are threads of this
// process (dist::ThreadGroup): rank 1, and the model file the ranks open.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"

#include "dist/communicator.h"
#include "dist/model_parallel.h"

namespace inferd::testing {

// Rank 1 of a 2-rank split: it follows rank 0 in dist::run_worker, as under mpirun, and is
// released (and joined) when this goes.
class Rank1 {
 public:
  Rank1() : ranks_(dist::ThreadGroup::make(2)), thread_([this] { dist::run_worker(*ranks_[1]); }) {}
  ~Rank1() {
    dist::release_workers(*ranks_[0]);
    thread_.join();
  }
  Rank1(const Rank1&) = delete;
  Rank1& operator=(const Rank1&) = delete;
  dist::Communicator* rank0() { return ranks_[0].get(); }
  dist::Communicator* rank1() { return ranks_[1].get(); }

 private:
  std::vector<std::unique_ptr<dist::Communicator>> ranks_;
  std::thread thread_;
};

// A model's bytes written to a file of this process's own under the temp folder (the other
// ranks load a model by its path, as under mpirun), open as `file`; removed when this goes.
class TempModelFile {
 public:
  TempModelFile(const std::vector<uint8_t>& bytes, const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              (name + "-" + std::to_string(::getpid()) + ".gguf")) {
    std::ofstream(path_, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    file = std::make_unique<gguf::GgufFile>(gguf::GgufFile::open(path_.string()));
  }
  ~TempModelFile() {
    file.reset();
    std::filesystem::remove(path_);
  }
  TempModelFile(const TempModelFile&) = delete;
  TempModelFile& operator=(const TempModelFile&) = delete;
  std::unique_ptr<gguf::GgufFile> file;

 private:
  std::filesystem::path path_;
};

}  // namespace inferd::testing

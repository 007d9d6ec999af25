// Rank 1 of a 2-rank split whose ranks are threads of this process (dist::ThreadGroup): it
// follows rank 0 in dist::run_worker, as under mpirun, and is released (and joined) when this
// goes. For the engine's tests of pipeline and data parallelism.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "dist/communicator.h"
#include "dist/model_parallel.h"

namespace inferd::testing {

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

}  // namespace inferd::testing

// Communicator: the collective and point-to-point operations between the processes (ranks) that
// split one model (tensor and pipeline parallelism, dist/model_parallel.h). Two transports: MPI
// between processes, on one machine or several (`mpirun -n N inferd ...`; built with
// INFERD_MPI), and threads of one process (ThreadGroup: the tests' stand-in, the same code on
// the model's side). Every rank calls each collective in the same order; a call returns when its
// result is there.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace inferd::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // data [n] becomes the element-wise sum of every rank's data.
  virtual void allreduce_sum(float* data, int64_t n) = 0;
  // Rank 0's bytes to every rank: the others' `bytes` become a copy of them. Rank 0 returns once
  // they are on their way (copied), not when the others have them: a pipeline's rank 0 tells the
  // others of its next batch while they still run the one before (several steps in flight).
  virtual void broadcast(std::vector<uint8_t>& bytes) = 0;
  // Rank r's counts[r] floats of `send`, one rank after the other, into `recv` on rank 0
  // (sum of counts floats; the others pass nullptr).
  virtual void gather(const float* send, float* recv, std::span<const int64_t> counts) = 0;
  // Rank r's counts[r] floats of `send`, one rank after the other, into `recv` on every rank
  // (sum of counts floats): a gather whose result every rank gets.
  virtual void allgatherv(const float* send, float* recv, std::span<const int64_t> counts) = 0;
  // All to all (expert parallelism over data-parallel ranks): send_counts[r] floats of `send`,
  // the ranks' parts one after the other in rank order, go to rank r (this rank's own part
  // included); rank r's part for this rank arrives in `recv`, the ranks' parts in rank order,
  // and recv_counts[r] says how many floats came from rank r. `recv` holds recv_capacity floats:
  // more is an error on the receiving rank. Every rank calls it, with nothing to send or not.
  // With counts_known, recv_counts already holds what each rank sends this one (both sides knew
  // it: a reply to an all-to-all before), so the counts are not exchanged first: one round
  // across the link instead of two.
  virtual void alltoallv(const float* send, std::span<const int64_t> send_counts, float* recv,
                         std::span<int64_t> recv_counts, int64_t recv_capacity,
                         bool counts_known = false) = 0;
  // Point to point (pipeline parallelism): n floats to rank `to`, handed off without waiting
  // for the receiver (`data` must stay as it is until wait_sends returns), and n floats from rank
  // `from` into `data`, returning once they are there. Between two ranks, messages arrive in the
  // order they were sent.
  virtual void send(int to, const float* data, int64_t n) = 0;
  virtual void recv(int from, float* data, int64_t n) = 0;
  // Returns once every send so far is done with its data.
  virtual void wait_sends() = 0;
  // A receive of n floats from rank `from` into `data`, posted now and completed by
  // wait_recv(ticket), in the order posted: a pipeline's rank 0 posts the receive of a batch's
  // final rows when it hands the batch on, so that the last rank's send of them has a place to
  // go whatever rank 0 does meanwhile. At most kMaxPendingRecvs at once.
  static constexpr int kMaxPendingRecvs = 256;
  virtual int64_t recv_later(int from, float* data, int64_t n) = 0;
  virtual void wait_recv(int64_t ticket) = 0;
  // Bytes this rank has sent so far (each collective counted as its payload once per other rank
  // it reaches: what a ring or tree moves is about that), and the seconds it spent in
  // collectives (waiting for the others included). Read from any thread (metrics).
  int64_t bytes_sent() const { return bytes_sent_.load(std::memory_order_relaxed); }
  // Marks the other ranks as told to stop (dist::release_workers); true the first time only.
  bool mark_released() { return !std::exchange(released_, true); }
  double comm_seconds() const { return comm_ns_.load(std::memory_order_relaxed) * 1e-9; }

 protected:
  void count_sent(int64_t bytes) { bytes_sent_.fetch_add(bytes, std::memory_order_relaxed); }
  // Adds the time from its making to its end to comm_seconds (one per collective).
  class Timed {
   public:
    explicit Timed(Communicator& c) : c_(c), start_(std::chrono::steady_clock::now()) {}
    ~Timed() {
      c_.comm_ns_.fetch_add(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::steady_clock::now() - start_)
                                .count(),
                            std::memory_order_relaxed);
    }

   private:
    Communicator& c_;
    std::chrono::steady_clock::time_point start_;
  };

 private:
  bool released_ = false;
  std::atomic<int64_t> bytes_sent_{0};
  std::atomic<int64_t> comm_ns_{0};
};

// This process's world: MPI's when built with INFERD_MPI and started by mpirun with more than
// one process, else one rank alone. init() before anything else in main (it takes MPI's
// arguments out of argv), finalize() last; world() in between.
void init(int& argc, char**& argv);
void finalize();
Communicator& world();

// N ranks as threads of this process (tests): make(N) gives each thread its communicator; the
// threads then call the collectives as processes would.
class ThreadGroup {
 public:
  static std::vector<std::unique_ptr<Communicator>> make(int size);
};

}  // namespace inferd::dist

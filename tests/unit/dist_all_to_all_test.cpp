// Communicator::alltoallv over the threads transport (dist::ThreadGroup, the tests' stand-in
// for MPI): each rank's parts reach their ranks, in rank order, with their counts (none
// included, and a rank's part to itself), the bytes sent count only the other ranks' parts, and
// counts known beforehand need no exchange, and a receiver whose buffer is short gets an error
// while the others go on. And Communicator::allgatherv: every rank's part on every rank.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "dist/communicator.h"
#include "util/error.h"

namespace inferd {
namespace {

// Floats rank `from` sends rank `to`: some pairs none.
int64_t part_size(int from, int to) { return (from + 1) * (to + 2) % 5; }
float value(int from, int to, int64_t i) { return static_cast<float>(from * 1000 + to * 100 + i); }

TEST(AllToAll, PartsArriveInRankOrderWithTheirCounts) {
  constexpr int kRanks = 3;
  auto comms = dist::ThreadGroup::make(kRanks);
  std::vector<std::string> problems(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      dist::Communicator& comm = *comms[static_cast<size_t>(r)];
      std::vector<float> send;
      std::vector<int64_t> counts(kRanks), recv_counts(kRanks, -1);
      int64_t to_others = 0;
      for (int q = 0; q < kRanks; ++q) {
        counts[static_cast<size_t>(q)] = part_size(r, q);
        for (int64_t i = 0; i < part_size(r, q); ++i) send.push_back(value(r, q, i));
        if (q != r) to_others += part_size(r, q);
      }
      std::vector<float> recv(32, -1.0f);
      comm.alltoallv(send.data(), counts, recv.data(), recv_counts, std::ssize(recv));
      size_t at = 0;
      for (int from = 0; from < kRanks; ++from) {
        if (recv_counts[static_cast<size_t>(from)] != part_size(from, r))
          problems[static_cast<size_t>(r)] += "count from " + std::to_string(from) + "; ";
        for (int64_t i = 0; i < part_size(from, r); ++i)
          if (recv[at++] != value(from, r, i))
            problems[static_cast<size_t>(r)] += "value " + std::to_string(i) + " from " + std::to_string(from) + "; ";
      }
      if (comm.bytes_sent() != to_others * static_cast<int64_t>(sizeof(float)))
        problems[static_cast<size_t>(r)] += "bytes sent " + std::to_string(comm.bytes_sent()) + "; ";
      // Counts known beforehand (a reply): the same parts, no exchange of counts.
      for (int from = 0; from < kRanks; ++from) recv_counts[static_cast<size_t>(from)] = part_size(from, r);
      std::fill(recv.begin(), recv.end(), -1.0f);
      comm.alltoallv(send.data(), counts, recv.data(), recv_counts, std::ssize(recv), true);
      at = 0;
      for (int from = 0; from < kRanks; ++from)
        for (int64_t i = 0; i < part_size(from, r); ++i)
          if (recv[at++] != value(from, r, i)) problems[static_cast<size_t>(r)] += "known counts; ";
      // An all-gather: every rank's part (of part_size(r, 0) + 1 floats) on every rank.
      std::vector<int64_t> gather_counts;
      int64_t total = 0;
      for (int q = 0; q < kRanks; ++q) total += gather_counts.emplace_back(part_size(q, 0) + 1);
      std::vector<float> mine(static_cast<size_t>(gather_counts[static_cast<size_t>(r)]));
      for (size_t i = 0; i < mine.size(); ++i) mine[i] = value(r, 9, static_cast<int64_t>(i));
      std::vector<float> all(static_cast<size_t>(total), -1.0f);
      comm.allgatherv(mine.data(), all.data(), gather_counts);
      at = 0;
      for (int q = 0; q < kRanks; ++q)
        for (int64_t i = 0; i < gather_counts[static_cast<size_t>(q)]; ++i)
          if (all[at++] != value(q, 9, i)) problems[static_cast<size_t>(r)] += "all-gather; ";
      // A last round: rank 1's buffer holds one float less than comes to it.
      const int64_t capacity = r == 1 ? part_size(0, 1) + part_size(1, 1) + part_size(2, 1) - 1 : 32;
      try {
        comm.alltoallv(send.data(), counts, recv.data(), recv_counts, capacity);
        if (r == 1) problems[1] += "no error for a short buffer; ";
      } catch (const Error& e) {
        if (r != 1) problems[static_cast<size_t>(r)] += std::string("error: ") + e.what();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_EQ(problems[static_cast<size_t>(r)], "") << "rank " << r;
}

}  // namespace
}  // namespace inferd

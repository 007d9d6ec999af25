#include "dist/communicator.h"

#include <algorithm>
#include <array>
#include <barrier>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <thread>

#ifdef INFERD_MPI
#include <mpi.h>
#endif

#include "util/error.h"

namespace inferd::dist {
namespace {

// One rank alone: the collectives have nothing to do.
class Alone final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(float*, int64_t) override {}
  void broadcast(std::vector<uint8_t>&) override {}
  void gather(const float* send, float* recv, std::span<const int64_t> counts) override {
    std::copy_n(send, counts[0], recv);
  }
  void allgatherv(const float* send, float* recv, std::span<const int64_t> counts) override {
    std::copy_n(send, counts[0], recv);
  }
  void alltoallv(const float* send, std::span<const int64_t> send_counts, float* recv,
                 std::span<int64_t> recv_counts, int64_t recv_capacity, bool counts_known) override {
    if (counts_known && recv_counts[0] != send_counts[0])
      fail("all-to-all: {} floats expected from this rank, {} sent", recv_counts[0], send_counts[0]);
    if (send_counts[0] > recv_capacity)
      fail("all-to-all: {} floats for a buffer of {}", send_counts[0], recv_capacity);
    std::copy_n(send, send_counts[0], recv);
    recv_counts[0] = send_counts[0];
  }
  void send(int to, const float*, int64_t) override { fail("no rank {} to send to: one rank alone", to); }
  void recv(int from, float*, int64_t) override { fail("no rank {} to receive from: one rank alone", from); }
  void wait_sends() override {}
  int64_t recv_later(int from, float*, int64_t) override {
    fail("no rank {} to receive from: one rank alone", from);
  }
  void wait_recv(int64_t) override { fail("no receive to wait for: one rank alone"); }
};

#ifdef INFERD_MPI
// MPI_COMM_WORLD. MPI is initialized with MPI_THREAD_SERIALIZED: the server's engine thread
// makes the calls, not main's, but never two threads at once.
//
// INFERD_EMULATED_LINK_LATENCY_US (the project's test hosts, scripts/netns-hosts: a kernel
// without netem's delay): every message arrives that much later, as over a link with that
// one-way latency. A point-to-point message carries its send time (a second, 8-byte message; a
// broadcast's leads with it) and its receiver waits until send time + latency; an all-reduce or a
// gather returns that much after MPI's call does (an all-to-all twice: its counts, its floats) (the ranks of a tensor-parallel step enter their
// collectives together, so a collective costs one latency more, as on a real link).
class Mpi final : public Communicator {
 public:
  Mpi() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    requests_.reserve(1024);
    send_times_.resize(1024);
    for (Outgoing& out : outgoing_) out.requests.assign(static_cast<size_t>(std::max(0, size_ - 1)), MPI_REQUEST_NULL);
    if (const char* us = std::getenv("INFERD_EMULATED_LINK_LATENCY_US")) {
      latency_ = std::chrono::microseconds(std::strtoll(us, nullptr, 10));
      if (latency_.count() <= 0) fail("INFERD_EMULATED_LINK_LATENCY_US={}: not a positive count", us);
    }
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Every rank's part to every rank (MPI_Allgather), then the sum in rank order: the same bits
  // on every rank and for every row whatever the batch holds. MPI_Allreduce may add the ranks'
  // parts in an order that depends on the message's size and the element's place in it, which
  // would make a sequence's tokens depend on what it is batched with.
  void allreduce_sum(float* data, int64_t n) override {
    const Timed timed(*this);
    parts_.resize(static_cast<size_t>(n) * static_cast<size_t>(size_));
    check(MPI_Allgather(data, count(n), MPI_FLOAT, parts_.data(), count(n), MPI_FLOAT,
                        MPI_COMM_WORLD),
          "MPI_Allgather");
    delay_after_collective();
    std::fill_n(data, n, 0.0f);
    for (int r = 0; r < size_; ++r) {
      const float* part = parts_.data() + static_cast<size_t>(r) * static_cast<size_t>(n);
      for (int64_t i = 0; i < n; ++i) data[i] += part[i];
    }
    count_sent(n * static_cast<int64_t>(sizeof(float)) * (size_ - 1));
  }
  ~Mpi() override {
    for (Outgoing& out : outgoing_) wait_all(out.requests);
    wait_sends();
  }
  // Rank 0 sends a copy to each rank (MPI_Isend: MPI_Bcast could hold rank 0 until a rank that
  // is still computing the batch before comes to it); each message leads with its send time.
  // The others take it whatever its size (MPI_Probe). Messages from rank 0 arrive in the order
  // sent, so every rank follows rank 0's in that order.
  void broadcast(std::vector<uint8_t>& bytes) override {
    const Timed timed(*this);
    if (rank_ == 0) {
      Outgoing& out = outgoing_[next_outgoing_++ % outgoing_.size()];
      wait_all(out.requests);  // (sent a ring's length of broadcasts ago: long delivered)
      out.bytes.resize(kSendTimeBytes + bytes.size());  // (capacity kept: no allocation per step)
      const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      std::memcpy(out.bytes.data(), &now, kSendTimeBytes);
      if (!bytes.empty()) std::memcpy(out.bytes.data() + kSendTimeBytes, bytes.data(), bytes.size());
      for (int r = 1; r < size_; ++r)
        check(MPI_Isend(out.bytes.data(), count(std::ssize(out.bytes)), MPI_BYTE, r, kBroadcastTag,
                        MPI_COMM_WORLD, &out.requests[static_cast<size_t>(r - 1)]),
              "MPI_Isend");
      count_sent(std::ssize(bytes) * (size_ - 1));
      return;
    }
    MPI_Status status;
    check(MPI_Probe(0, kBroadcastTag, MPI_COMM_WORLD, &status), "MPI_Probe");
    int n = 0;
    check(MPI_Get_count(&status, MPI_BYTE, &n), "MPI_Get_count");
    if (n < kSendTimeBytes) fail("MPI: a message from rank 0 of {} bytes", n);
    incoming_.resize(static_cast<size_t>(n));
    check(MPI_Recv(incoming_.data(), n, MPI_BYTE, 0, kBroadcastTag, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
    int64_t sent = 0;
    std::memcpy(&sent, incoming_.data(), kSendTimeBytes);
    bytes.assign(incoming_.begin() + kSendTimeBytes, incoming_.end());
    arrive_after(sent);
  }
  void gather(const float* send, float* recv, std::span<const int64_t> counts) override {
    const Timed timed(*this);
    lay_out(counts);
    check(MPI_Gatherv(send, counts_[static_cast<size_t>(rank_)], MPI_FLOAT, recv, counts_.data(),
                      displacements_.data(), MPI_FLOAT, 0, MPI_COMM_WORLD),
          "MPI_Gatherv");
    delay_after_collective();
    if (rank_ != 0) count_sent(counts[static_cast<size_t>(rank_)] * static_cast<int64_t>(sizeof(float)));
  }
  void allgatherv(const float* send, float* recv, std::span<const int64_t> counts) override {
    const Timed timed(*this);
    lay_out(counts);
    check(MPI_Allgatherv(send, counts_[static_cast<size_t>(rank_)], MPI_FLOAT, recv, counts_.data(),
                         displacements_.data(), MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Allgatherv");
    delay_after_collective();
    count_sent(counts[static_cast<size_t>(rank_)] * static_cast<int64_t>(sizeof(float)) * (size_ - 1));
  }
  // The counts first (MPI_Alltoall), then the floats (MPI_Alltoallv).
  void alltoallv(const float* send, std::span<const int64_t> send_counts, float* recv,
                 std::span<int64_t> recv_counts, int64_t recv_capacity, bool counts_known) override {
    const Timed timed(*this);
    const auto n = static_cast<size_t>(size_);
    if (!counts_known) {
      check(MPI_Alltoall(send_counts.data(), 1, MPI_INT64_T, recv_counts.data(), 1, MPI_INT64_T,
                         MPI_COMM_WORLD),
            "MPI_Alltoall");
      delay_after_collective();  // (the counts cross the link before the floats can)
    }
    counts_.resize(n);
    displacements_.resize(n);
    recv_ints_.resize(n);
    recv_displacements_.resize(n);
    int64_t sent = 0, sent_offset = 0, received = 0;
    for (size_t r = 0; r < n; ++r) {
      counts_[r] = count(send_counts[r]);
      displacements_[r] = count(sent_offset);
      sent_offset += send_counts[r];
      if (static_cast<int>(r) != rank_) sent += send_counts[r];
      recv_ints_[r] = count(recv_counts[r]);
      recv_displacements_[r] = count(received);
      received += recv_counts[r];
    }
    if (received > recv_capacity)
      fail("all-to-all: {} floats for a buffer of {}", received, recv_capacity);
    check(MPI_Alltoallv(send, counts_.data(), displacements_.data(), MPI_FLOAT, recv,
                        recv_ints_.data(), recv_displacements_.data(), MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Alltoallv");
    delay_after_collective();
    count_sent(sent * static_cast<int64_t>(sizeof(float)));
  }
  void send(int to, const float* data, int64_t n) override {
    MPI_Request& request = requests_.emplace_back();  // (capacity kept: no allocation per step)
    check(MPI_Isend(data, count(n), MPI_FLOAT, to, kPointToPointTag, MPI_COMM_WORLD, &request),
          "MPI_Isend");
    count_sent(n * static_cast<int64_t>(sizeof(float)));
    if (latency_.count() > 0) {  // its send time, for the receiver's emulated latency
      if (requests_.size() >= send_times_.size()) fail("MPI: too many sends in flight");
      int64_t& at = send_times_[requests_.size()];
      at = std::chrono::steady_clock::now().time_since_epoch().count();
      check(MPI_Isend(&at, 1, MPI_INT64_T, to, kSendTimeTag, MPI_COMM_WORLD, &requests_.emplace_back()),
            "MPI_Isend");
    }
  }
  void recv(int from, float* data, int64_t n) override {
    const Timed timed(*this);
    check(MPI_Recv(data, count(n), MPI_FLOAT, from, kPointToPointTag, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE),
          "MPI_Recv");
    if (latency_.count() > 0) {
      int64_t sent = 0;
      check(MPI_Recv(&sent, 1, MPI_INT64_T, from, kSendTimeTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
            "MPI_Recv");
      arrive_after(sent);
    }
  }
  int64_t recv_later(int from, float* data, int64_t n) override {
    const int64_t ticket = next_ticket_++;
    PendingRecv& p = pending_[static_cast<size_t>(ticket % kMaxPendingRecvs)];
    if (p.posted) fail("MPI: more than {} receives pending", kMaxPendingRecvs);
    p.posted = true;
    check(MPI_Irecv(data, count(n), MPI_FLOAT, from, kPointToPointTag, MPI_COMM_WORLD, &p.data),
          "MPI_Irecv");
    if (latency_.count() > 0)
      check(MPI_Irecv(&p.sent, 1, MPI_INT64_T, from, kSendTimeTag, MPI_COMM_WORLD, &p.time),
            "MPI_Irecv");
    return ticket;
  }
  void wait_recv(int64_t ticket) override {
    const Timed timed(*this);
    PendingRecv& p = pending_[static_cast<size_t>(ticket % kMaxPendingRecvs)];
    if (ticket < 0 || ticket >= next_ticket_ || !p.posted) fail("MPI: no receive {} pending", ticket);
    check(MPI_Wait(&p.data, MPI_STATUS_IGNORE), "MPI_Wait");
    if (latency_.count() > 0) {
      check(MPI_Wait(&p.time, MPI_STATUS_IGNORE), "MPI_Wait");
      arrive_after(p.sent);
    }
    p.posted = false;
  }
  void wait_sends() override {
    if (requests_.empty()) return;
    const Timed timed(*this);
    check(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
    requests_.clear();
  }

 private:
  static constexpr int kPointToPointTag = 1, kSendTimeTag = 2, kBroadcastTag = 3;
  static constexpr int kSendTimeBytes = sizeof(int64_t);
  void delay_after_collective() const {
    if (latency_.count() > 0) std::this_thread::sleep_for(latency_);
  }
  // Emulated latency: returns at `sent` (a steady_clock count: the machine's monotonic clock, the
  // same in every namespace of it) plus the latency.
  void arrive_after(int64_t sent) const {
    if (latency_.count() <= 0) return;
    std::this_thread::sleep_until(
        std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(sent)) + latency_);
  }
  static void wait_all(std::vector<MPI_Request>& requests) {
    check(MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE),
          "MPI_Waitall");
  }
  // Rank 0's broadcasts still on their way: a ring, each entry its copy of the message and a send
  // to every other rank.
  struct Outgoing {
    std::vector<uint8_t> bytes;
    std::vector<MPI_Request> requests;  // [size - 1]
  };
  std::array<Outgoing, 8> outgoing_;
  size_t next_outgoing_ = 0;
  std::vector<uint8_t> incoming_;  // a broadcast as received, with its send time
  struct PendingRecv {
    bool posted = false;
    MPI_Request data = MPI_REQUEST_NULL, time = MPI_REQUEST_NULL;
    int64_t sent = 0;
  };
  std::array<PendingRecv, kMaxPendingRecvs> pending_;  // recv_later's, by ticket
  int64_t next_ticket_ = 0;
  // counts_ and displacements_ for the ranks' parts laid one after the other (gather,
  // allgatherv).
  void lay_out(std::span<const int64_t> counts) {
    counts_.resize(counts.size());
    displacements_.resize(counts.size());
    int offset = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      counts_[r] = count(counts[r]);
      displacements_[r] = offset;
      offset += counts_[r];
    }
  }
  static int count(int64_t n) {
    if (n > INT32_MAX) fail("MPI: a message of {} elements is too large", n);
    return static_cast<int>(n);
  }
  static void check(int rc, const char* what) {
    if (rc != MPI_SUCCESS) fail("{} failed (MPI error {})", what, rc);
  }
  int rank_ = 0, size_ = 1;
  std::vector<int> counts_, displacements_, recv_ints_, recv_displacements_;
  std::vector<float> parts_;  // [size, n] every rank's part of an all-reduce
  std::vector<MPI_Request> requests_;  // the sends not yet waited for
  std::vector<int64_t> send_times_;    // their send times (emulated latency), by request
  std::chrono::microseconds latency_{0};  // INFERD_EMULATED_LINK_LATENCY_US
};
#endif

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> world;
  return world;
}

bool& mpi_started() {
  static bool started = false;
  return started;
}

// The messages sent from one rank to another and not yet received, in order.
struct Mailbox {
  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<std::vector<float>> messages;
  std::deque<std::vector<uint8_t>> broadcasts;  // (from rank 0 only) in the order sent
};

// The shared side of a ThreadGroup: each rank's posted buffer, a barrier between phases, and a
// mailbox for each (from, to) pair.
struct ThreadShared {
  explicit ThreadShared(int size)
      : barrier(size),
        posted(static_cast<size_t>(size)),
        mailboxes(static_cast<size_t>(size) * static_cast<size_t>(size)) {}
  std::barrier<> barrier;
  std::vector<const void*> posted;  // [size] what each rank put up for the collective
  std::vector<Mailbox> mailboxes;   // [from * size + to]
};

class ThreadRank final : public Communicator {
 public:
  ThreadRank(std::shared_ptr<ThreadShared> shared, int rank, int size)
      : shared_(std::move(shared)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(float* data, int64_t n) override {
    post(data);
    sum_.assign(static_cast<size_t>(n), 0.0f);
    for (int r = 0; r < size_; ++r) {  // every rank adds in rank order: the same bits everywhere
      const auto* from = static_cast<const float*>(shared_->posted[static_cast<size_t>(r)]);
      for (int64_t i = 0; i < n; ++i) sum_[static_cast<size_t>(i)] += from[i];
    }
    shared_->barrier.arrive_and_wait();  // everyone has read every rank's data
    std::copy(sum_.begin(), sum_.end(), data);
    count_sent(n * static_cast<int64_t>(sizeof(float)) * (size_ - 1));
  }
  // As over MPI, rank 0 leaves a copy for each rank and goes on.
  void broadcast(std::vector<uint8_t>& bytes) override {
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) {
        Mailbox& box = mailbox(0, r);
        {
          const std::lock_guard lock(box.mutex);
          box.broadcasts.push_back(bytes);
        }
        box.arrived.notify_all();
      }
      count_sent(static_cast<int64_t>(bytes.size()) * (size_ - 1));
      return;
    }
    Mailbox& box = mailbox(0, rank_);
    std::unique_lock lock(box.mutex);
    box.arrived.wait(lock, [&] { return !box.broadcasts.empty(); });
    bytes = std::move(box.broadcasts.front());
    box.broadcasts.pop_front();
  }
  void gather(const float* send, float* recv, std::span<const int64_t> counts) override {
    post(send);
    if (rank_ == 0) copy_posted(counts, recv);
    shared_->barrier.arrive_and_wait();
    if (rank_ != 0) count_sent(counts[static_cast<size_t>(rank_)] * static_cast<int64_t>(sizeof(float)));
  }
  void allgatherv(const float* send, float* recv, std::span<const int64_t> counts) override {
    post(send);
    copy_posted(counts, recv);
    shared_->barrier.arrive_and_wait();  // everyone has read every rank's data
    count_sent(counts[static_cast<size_t>(rank_)] * static_cast<int64_t>(sizeof(float)) * (size_ - 1));
  }
  // Each rank puts up its buffer and counts; each then copies its part of every rank's.
  void alltoallv(const float* send, std::span<const int64_t> send_counts, float* recv,
                 std::span<int64_t> recv_counts, int64_t recv_capacity, bool counts_known) override {
    const AllToAll mine{send, send_counts.data()};
    post(&mine);
    int64_t received = 0, sent = 0;
    bool as_known = true;
    for (int r = 0; r < size_; ++r) {
      const auto* from = static_cast<const AllToAll*>(shared_->posted[static_cast<size_t>(r)]);
      int64_t offset = 0;
      for (int q = 0; q < rank_; ++q) offset += from->counts[q];
      const int64_t n = from->counts[rank_];
      as_known = as_known && (!counts_known || recv_counts[static_cast<size_t>(r)] == n);
      recv_counts[static_cast<size_t>(r)] = n;
      if (received + n <= recv_capacity) std::copy_n(from->data + offset, n, recv + received);
      received += n;
      if (r != rank_) sent += send_counts[static_cast<size_t>(r)];
    }
    shared_->barrier.arrive_and_wait();  // everyone has read every rank's data
    if (!as_known) fail("all-to-all: other counts came than the ones known");
    if (received > recv_capacity)
      fail("all-to-all: {} floats for a buffer of {}", received, recv_capacity);
    count_sent(sent * static_cast<int64_t>(sizeof(float)));
  }
  // A send is a copy into the mailbox (done at once: wait_sends has nothing to wait for).
  void send(int to, const float* data, int64_t n) override {
    Mailbox& box = mailbox(rank_, to);
    {
      const std::lock_guard lock(box.mutex);
      box.messages.emplace_back(data, data + n);
    }
    box.arrived.notify_all();
    count_sent(n * static_cast<int64_t>(sizeof(float)));
  }
  void recv(int from, float* data, int64_t n) override {
    Mailbox& box = mailbox(from, rank_);
    std::unique_lock lock(box.mutex);
    box.arrived.wait(lock, [&] { return !box.messages.empty(); });
    const std::vector<float> message = std::move(box.messages.front());
    box.messages.pop_front();
    lock.unlock();
    if (std::ssize(message) != n)
      fail("rank {} expected {} floats from rank {}, got {}", rank_, n, from, message.size());
    std::copy(message.begin(), message.end(), data);
  }
  void wait_sends() override {}
  // Taken from the mailbox when waited for, in the order posted (as MPI matches them).
  int64_t recv_later(int from, float* data, int64_t n) override {
    if (std::ssize(later_) >= kMaxPendingRecvs) fail("more than {} receives pending", kMaxPendingRecvs);
    later_.push_back({from, data, n});
    return next_ticket_++;
  }
  void wait_recv(int64_t ticket) override {
    if (ticket < 0 || ticket >= next_ticket_) fail("no receive {} pending", ticket);
    while (first_ticket_ <= ticket) {
      const Later r = later_.front();
      later_.pop_front();
      ++first_ticket_;
      recv(r.from, r.data, r.n);
    }
  }

 private:
  struct AllToAll {
    const float* data;
    const int64_t* counts;  // [size]
  };
  struct Later {
    int from;
    float* data;
    int64_t n;
  };
  std::deque<Later> later_;  // tickets [first_ticket_, next_ticket_)
  int64_t first_ticket_ = 0, next_ticket_ = 0;
  Mailbox& mailbox(int from, int to) {
    if (from < 0 || from >= size_ || to < 0 || to >= size_ || from == to)
      fail("no message between ranks {} and {} of {}", from, to, size_);
    return shared_->mailboxes[static_cast<size_t>(from * size_ + to)];
  }
  // Puts this rank's buffer up and waits until every rank has.
  void post(const void* data) {
    shared_->posted[static_cast<size_t>(rank_)] = data;
    shared_->barrier.arrive_and_wait();
  }
  // Every rank's posted counts[r] floats, one rank after the other, into `recv` (gather,
  // allgatherv).
  void copy_posted(std::span<const int64_t> counts, float* recv) const {
    int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      const auto* from = static_cast<const float*>(shared_->posted[static_cast<size_t>(r)]);
      std::copy_n(from, counts[static_cast<size_t>(r)], recv + offset);
      offset += counts[static_cast<size_t>(r)];
    }
  }
  std::shared_ptr<ThreadShared> shared_;
  int rank_, size_;
  std::vector<float> sum_;
};

}  // namespace

void init(int& argc, char**& argv) {
#ifdef INFERD_MPI
  // Only under a launcher (mpirun sets OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK): a plain
  // `inferd` run starts no MPI runtime.
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
      std::getenv("PMIX_RANK") != nullptr) {
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    mpi_started() = true;
    if (provided < MPI_THREAD_SERIALIZED) fail("MPI gives no MPI_THREAD_SERIALIZED support");
    world_slot() = std::make_unique<Mpi>();
    return;
  }
#else
  (void)argc;
  (void)argv;
#endif
  world_slot() = std::make_unique<Alone>();
}

void finalize() {
  world_slot().reset();
#ifdef INFERD_MPI
  if (mpi_started()) MPI_Finalize();
#endif
  mpi_started() = false;
}

Communicator& world() {
  if (!world_slot()) world_slot() = std::make_unique<Alone>();
  return *world_slot();
}

std::vector<std::unique_ptr<Communicator>> ThreadGroup::make(int size) {
  auto shared = std::make_shared<ThreadShared>(size);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<ThreadRank>(shared, r, size));
  return ranks;
}

}  // namespace inferd::dist

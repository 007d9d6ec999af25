#include "server/http/transport.h"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "util/error.h"

namespace inferd::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;
using Clock = std::chrono::steady_clock;

// A response's bytes not yet taken by the socket; a handler writing more waits for the client.
constexpr size_t kMaxPendingOutput = 1 << 20;
// Bytes of a next (pipelined) request read while the current one is handled; beyond, the
// connection is not read until the answer is sent.
constexpr size_t kMaxReadAhead = 64 << 10;
// After an error answer the rest of the request is read and dropped for this long, so the
// client sees the answer rather than a reset (a close with unread data sends RST).
constexpr auto kLingerTime = std::chrono::seconds(2);
constexpr size_t kMaxLingerBytes = 64 << 20;
constexpr size_t kLingerChunk = 16 << 10;
// Handler threads for GET, HEAD and OPTIONS (health, metrics, pages): never queued behind
// generations, which hold the others for their whole length.
constexpr int kLightThreads = 4;

std::chrono::nanoseconds seconds(double s) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(s));
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    default:
      return status < 400 ? "OK" : "Error";
  }
}

// Threads that run handlers, fed by a queue. The queue is bounded by the connections: each
// has at most one request being handled.
class HandlerThreads {
 public:
  explicit HandlerThreads(int n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this] { work(); });
  }
  ~HandlerThreads() { join(); }
  void submit(std::function<void()> job) {
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(job));
    }
    ready_.notify_one();
  }
  // Runs what is queued, then ends the threads.
  void join() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mu_);
        ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

enum class Phase {
  kHeader,    // waiting for a request's line and headers
  kBody,      // reading its body
  kHandling,  // a handler thread answers it
  kLinger,    // an error answer sent; dropping what the client still sends
  kClosed,
};

struct Connection {
  Connection(tcp::socket s, std::string address)
      : socket(std::move(s)), deadline(socket.get_executor()), client(std::move(address)) {}

  // Touched by the I/O thread only.
  tcp::socket socket;
  asio::steady_timer deadline;
  uint64_t deadline_generation = 0;  // a timer that fired after being re-armed is ignored
  beast::flat_buffer buffer;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser;
  std::string client;
  std::list<std::shared_ptr<Connection>>::iterator registered;
  Phase phase = Phase::kHeader;
  bool reading_ahead = false;      // a raw read (disconnect watch, pipelined bytes) is pending
  bool resume_after_read = false;  // start the next request when that read completes
  size_t body_reserved = 0;        // bytes of the body budget this request holds
  std::string in_flight;           // bytes handed to the socket
  std::unique_ptr<char[]> linger_scratch;  // made when lingering: most connections never do

  // Shared with the handler thread, under `mu`.
  std::mutex mu;
  std::condition_variable drained;
  std::string pending;  // bytes the handler wrote, not yet handed to the socket
  bool flushing = false;
  bool finished = false;  // the handler has written its whole answer
  bool closed = false;
  bool keep_alive_after = false;
};
using ConnectionPtr = std::shared_ptr<Connection>;

}  // namespace

struct HttpTransport::Impl {
  const HttpRoutes& routes;
  HttpLimits limits;
  asio::io_context io{1};
  std::vector<tcp::acceptor> acceptors;
  asio::steady_timer stop_poll{io};
  std::atomic<bool> stopping{false};
  // Connections, oldest first, and how many each client address holds (I/O thread only).
  std::list<ConnectionPtr> open;
  std::unordered_map<std::string, int> per_client;
  // Request bodies held in memory (being read or handled), against `body_budget`.
  std::atomic<size_t> body_bytes{0};
  size_t body_budget;
  HandlerThreads light{kLightThreads};
  HandlerThreads heavy;

  Impl(const HttpRoutes& r, HttpLimits l)
      : routes(r),
        limits(l),
        body_budget(std::max<size_t>(size_t{512} << 20, 2 * l.max_body_bytes)),
        heavy(std::max(1, l.handler_threads)) {
    limits.max_connections = std::max(1, std::min(limits.max_connections, open_file_room()));
  }

  // Raises the open-file limit to its hard maximum; returns how many connections fit in it
  // (room kept for the model file, logs and the engine).
  static int open_file_room() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
    if (rl.rlim_cur < rl.rlim_max) {
      rlimit raised = rl;
      raised.rlim_cur = rl.rlim_max;
      if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
    }
    const rlim_t room = rl.rlim_cur > 256 ? rl.rlim_cur - 128 : rl.rlim_cur / 2;
    return static_cast<int>(std::min<rlim_t>(room, 1 << 24));
  }

  // --- connections ---------------------------------------------------------------------

  void accept(tcp::acceptor& acceptor) {
    acceptor.async_accept(io, [this, &acceptor](error_code ec, tcp::socket socket) {
      if (stopping.load()) return;
      if (ec) {
        // Out of file descriptors (or a transient error): retry shortly instead of spinning.
        auto retry = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(50));
        retry->async_wait([this, &acceptor, retry](error_code) { accept(acceptor); });
        return;
      }
      admit(std::move(socket));
      accept(acceptor);
    });
  }

  void admit(tcp::socket socket) {
    error_code ec;
    const tcp::endpoint peer = socket.remote_endpoint(ec);
    if (ec) return;
    std::string address = peer.address().to_string();
    const auto held = per_client.find(address);
    if (held != per_client.end() && held->second >= limits.max_connections_per_client)
      return refuse(socket, "too many connections from this address");
    // (Evicting may close this client's own oldest connection, so the count is read after.)
    if (std::ssize(open) >= limits.max_connections && !evict_one_waiting())
      return refuse(socket, "the server has too many connections open");
    ++per_client[address];
    socket.set_option(tcp::no_delay(true), ec);
    auto c = std::make_shared<Connection>(std::move(socket), std::move(address));
    c->registered = open.insert(open.end(), c);
    start_request(c);
  }

  // A best-effort 503 (the routes' error answer) on a connection that is not taken, then closed.
  void refuse(tcp::socket& socket, std::string_view why) {
    HttpResponse res;
    routes.error(HttpRequest(), res, 503, why);
    const std::string answer = serialize_head(res, res.body.size(), false, false) + res.body;
    error_code ec;
    socket.non_blocking(true, ec);
    socket.write_some(asio::buffer(answer), ec);
    socket.close(ec);
  }

  // Makes room at the connection cap: closes the oldest connection still waiting for its
  // request (idle keep-alive, stalled or trickling headers). False when every one is busy.
  bool evict_one_waiting() {
    for (const ConnectionPtr& c : open) {
      if (c->phase == Phase::kHeader || c->phase == Phase::kLinger) {
        close(c);
        return true;
      }
    }
    return false;
  }

  void close(const ConnectionPtr& c) {
    if (c->phase == Phase::kClosed) return;
    c->phase = Phase::kClosed;
    {
      std::lock_guard lock(c->mu);
      c->closed = true;
    }
    c->drained.notify_all();
    error_code ec;
    c->socket.shutdown(tcp::socket::shutdown_both, ec);
    c->socket.close(ec);
    c->deadline.cancel();
    release_body(*c);  // while handling, 0: the handler thread gives the reservation back
    const auto it = per_client.find(c->client);
    if (it != per_client.end() && --it->second <= 0) per_client.erase(it);
    open.erase(c->registered);
  }

  void release_body(Connection& c) { body_bytes.fetch_sub(std::exchange(c.body_reserved, 0)); }

  // Holds `total` bytes of the body budget for c's request; false when the budget is spent.
  bool reserve_body(Connection& c, size_t total) {
    if (total <= c.body_reserved) return true;
    const size_t more = total - c.body_reserved;
    if (body_bytes.fetch_add(more) + more > body_budget) {
      body_bytes.fetch_sub(more);
      return false;
    }
    c.body_reserved = total;
    return true;
  }

  void arm(const ConnectionPtr& c, double timeout_s) {
    const uint64_t generation = ++c->deadline_generation;
    c->deadline.expires_after(seconds(timeout_s));
    c->deadline.async_wait([this, c, generation](error_code ec) {
      if (ec || generation != c->deadline_generation || c->phase == Phase::kClosed) return;
      on_deadline(c);
    });
  }

  void disarm(const ConnectionPtr& c) {
    ++c->deadline_generation;
    c->deadline.cancel();
  }

  void on_deadline(const ConnectionPtr& c) {
    switch (c->phase) {
      case Phase::kHeader: {
        // An idle keep-alive connection just closes; a half-sent request is told why.
        const bool started = c->buffer.size() > 0 || (c->parser && c->parser->got_some());
        if (!started) return close(c);
        return fail(c, 408,
                    fmt::format("the request's headers did not arrive within {} s",
                                limits.header_timeout_s));
      }
      case Phase::kBody:
        return fail(
            c, 408,
            fmt::format("the request's body did not arrive within {} s", limits.body_timeout_s));
      case Phase::kHandling:  // a write made no progress: the client does not read
      case Phase::kLinger:
      case Phase::kClosed:
        return close(c);
    }
  }

  // --- reading a request -----------------------------------------------------------------

  void start_request(const ConnectionPtr& c) {
    c->phase = Phase::kHeader;
    c->parser.emplace();
    c->parser->header_limit(static_cast<uint32_t>(limits.max_header_bytes));
    c->parser->body_limit(limits.max_body_bytes);
    arm(c, limits.header_timeout_s);
    bhttp::async_read_header(c->socket, c->buffer, *c->parser,
                             [this, c](error_code ec, size_t) { on_header(c, ec); });
  }

  static bool is_disconnect(const error_code& ec) {
    return ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message ||
           ec == asio::error::eof || ec == asio::error::connection_reset ||
           ec == asio::error::broken_pipe || ec == asio::error::operation_aborted;
  }

  // The status and message for a parse error.
  std::pair<int, std::string> parse_failure(const error_code& ec) const {
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow)
      return {431, fmt::format("the request's headers are larger than {} bytes",
                               limits.max_header_bytes)};
    if (ec == bhttp::error::body_limit)
      return {413, fmt::format("the request body is larger than {} bytes", limits.max_body_bytes)};
    if (ec == bhttp::error::bad_content_length)
      return {400, "the request's Content-Length is malformed, contradictory or too large"};
    if (ec == bhttp::error::bad_transfer_encoding)
      return {400, "the request's Transfer-Encoding is not supported (only chunked)"};
    return {400, fmt::format("the request is not valid HTTP/1.1 ({})", ec.message())};
  }

  void on_header(const ConnectionPtr& c, error_code ec) {
    if (c->phase != Phase::kHeader) return;  // closed meanwhile
    if (ec) {
      if (is_disconnect(ec)) return close(c);
      const auto [status, message] = parse_failure(ec);
      return fail(c, status, message);
    }
    const auto& head = c->parser->get();
    if (std::distance(head.begin(), head.end()) > limits.max_headers)
      return fail(c, 431, fmt::format("the request has more than {} headers", limits.max_headers));
    // A body sent both ways is how requests are smuggled past proxies: refused.
    if (head.count(bhttp::field::content_length) > 0 &&
        head.count(bhttp::field::transfer_encoding) > 0)
      return fail(c, 400, "the request has both Content-Length and Transfer-Encoding");
    const auto encoding = head[bhttp::field::content_encoding];
    if (!encoding.empty() && !beast::iequals(encoding, "identity"))
      return fail(c, 415,
                  fmt::format("request bodies with Content-Encoding '{}' are not accepted; "
                              "send them uncompressed",
                              std::string_view(encoding.data(), encoding.size())));
    if (!reserve_body(*c, c->parser->content_length().value_or(0)))
      return fail(c, 503, "the server holds too many request bodies; retry later");
    const auto expect = head[bhttp::field::expect];
    if (!expect.empty()) {
      if (!beast::iequals(expect, "100-continue"))
        return fail(c, 417, "only 'Expect: 100-continue' is understood");
      if (!c->parser->is_done()) {
        // The client waits for this before it sends the body.
        c->in_flight = "HTTP/1.1 100 Continue\r\n\r\n";
        asio::async_write(c->socket, asio::buffer(c->in_flight), [this, c](error_code ec2, size_t) {
          if (c->phase != Phase::kHeader) return;
          if (ec2) return close(c);
          read_body(c);
        });
        return;
      }
    }
    if (c->parser->is_done()) return dispatch(c);
    read_body(c);
  }

  void read_body(const ConnectionPtr& c) {
    if (c->phase == Phase::kHeader) {
      c->phase = Phase::kBody;
      arm(c, limits.body_timeout_s);
    }
    bhttp::async_read_some(c->socket, c->buffer, *c->parser,
                           [this, c](error_code ec, size_t) { on_body(c, ec); });
  }

  void on_body(const ConnectionPtr& c, error_code ec) {
    if (c->phase != Phase::kBody) return;
    if (ec) {
      if (is_disconnect(ec)) return close(c);
      const auto [status, message] = parse_failure(ec);
      return fail(c, status, message);
    }
    if (!reserve_body(*c, c->parser->get().body().size()))
      return fail(c, 503, "the server holds too many request bodies; retry later");
    if (c->parser->is_done()) return dispatch(c);
    read_body(c);
  }

  // Reads ahead while the request is handled: notices a client that leaves (so its
  // generation stops) and keeps what a pipelining client already sends.
  void read_ahead(const ConnectionPtr& c) {
    if (c->reading_ahead || c->buffer.size() >= kMaxReadAhead) return;
    c->reading_ahead = true;
    c->socket.async_read_some(c->buffer.prepare(4096), [this, c](error_code ec, size_t n) {
      c->reading_ahead = false;
      if (c->phase == Phase::kClosed || c->phase == Phase::kLinger) return;
      if (!ec) c->buffer.commit(n);
      if (c->resume_after_read) {  // cancelled (or completed) as the answer was sent
        c->resume_after_read = false;
        if (ec && ec != asio::error::operation_aborted) return close(c);
        return start_request(c);
      }
      if (ec) return close(c);  // the client left: its handler sees a closed connection
      read_ahead(c);
    });
  }

  // The request line and headers c's parser has read, as the handlers see them.
  static HttpRequest request_head(const Connection& c) {
    const auto& head = c.parser->get();
    HttpRequest req;
    req.method = std::string(head.method_string());
    req.target = std::string(head.target());
    req.path = req.target.substr(0, req.target.find('?'));
    for (const auto& field : head)
      req.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    req.remote_addr = c.client;
    return req;
  }

  void dispatch(const ConnectionPtr& c) {
    c->phase = Phase::kHandling;
    disarm(c);
    auto& message = c->parser->get();
    HttpRequest req = request_head(*c);
    req.body = std::move(message.body());
    const bool keep_alive = message.keep_alive();
    const bool chunked_ok = message.version() >= 11;
    const size_t body_reserved = std::exchange(c->body_reserved, 0);
    c->parser.reset();
    {
      std::lock_guard lock(c->mu);
      c->finished = false;
    }
    read_ahead(c);
    const bool light_route = req.method == "GET" || req.method == "HEAD" || req.method == "OPTIONS";
    (light_route ? light : heavy)
        .submit([this, c, body_reserved, keep_alive, chunked_ok, req = std::move(req)]() mutable {
          handle(c, std::move(req), body_reserved, keep_alive, chunked_ok);
        });
  }

  // An error answer, then the connection lingers (reading and dropping) and closes.
  void fail(const ConnectionPtr& c, int status, std::string_view message) {
    HttpRequest req;
    if (c->parser && c->parser->is_header_done()) req = request_head(*c);
    HttpResponse res;
    routes.error(req, res, status, message);
    c->parser.reset();
    release_body(*c);
    c->phase = Phase::kLinger;
    error_code ec;
    c->socket.cancel(ec);  // a pending read completes as aborted and is ignored
    c->in_flight = serialize_head(res, res.body.size(), false, false) + res.body;
    arm(c, limits.write_timeout_s);
    asio::async_write(c->socket, asio::buffer(c->in_flight), [this, c](error_code ec2, size_t) {
      if (c->phase != Phase::kLinger) return;
      if (ec2) return close(c);
      error_code ignored;
      c->socket.shutdown(tcp::socket::shutdown_send, ignored);
      arm(c, std::chrono::duration<double>(kLingerTime).count());
      c->linger_scratch = std::make_unique<char[]>(kLingerChunk);
      linger(c, 0);
    });
  }

  void linger(const ConnectionPtr& c, size_t dropped) {
    c->socket.async_read_some(asio::buffer(c->linger_scratch.get(), kLingerChunk),
                              [this, c, dropped](error_code ec, size_t n) {
                                if (c->phase != Phase::kLinger) return;
                                if (ec || dropped + n > kMaxLingerBytes) return close(c);
                                linger(c, dropped + n);
                              });
  }

  // --- answering -------------------------------------------------------------------------

  // content_length npos: none (a stream).
  static std::string serialize_head(const HttpResponse& res, size_t content_length, bool chunked,
                                    bool keep_alive) {
    std::string head = fmt::format("HTTP/1.1 {} {}\r\n", res.status, reason_phrase(res.status));
    for (const auto& [name, value] : res.headers) head += fmt::format("{}: {}\r\n", name, value);
    if (!res.content_type.empty()) head += fmt::format("Content-Type: {}\r\n", res.content_type);
    if (chunked) {
      head += "Transfer-Encoding: chunked\r\n";
    } else if (content_length != std::string::npos) {
      head += fmt::format("Content-Length: {}\r\n", content_length);
    }
    head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
    return head;
  }

  // Runs on a handler thread.
  // `body_reserved`: the body budget req's body holds, given back once it is answered.
  void handle(const ConnectionPtr& c, HttpRequest req, size_t body_reserved, bool keep_alive,
              bool chunked_ok) {
    HttpResponse res;
    routes.dispatch(req, res);
    req.body = std::string();  // its memory goes back before a long generation
    body_bytes.fetch_sub(body_reserved);
    const bool head_only = req.method == "HEAD";
    bool complete = true;
    if (!res.provider) {
      std::string out = serialize_head(res, res.body.size(), false, keep_alive);
      if (!head_only) out += res.body;
      complete = send(c, std::move(out));
    } else if (head_only) {
      complete = send(c, serialize_head(res, std::string::npos, chunked_ok, keep_alive));
      if (res.releaser) res.releaser(false);
    } else {
      complete = stream(c, res, keep_alive && chunked_ok, chunked_ok);
    }
    finish(c, keep_alive && complete);
  }

  // The head goes with the first bytes (or the end): an answer that is written whole at the end
  // of a generation then reaches the client at once, as llama-server sends it, and a client
  // that leaves meanwhile is seen by the I/O thread's read, not by a write.
  bool stream(const ConnectionPtr& c, HttpResponse& res, bool keep_alive, bool chunked) {
    bool sent_ok = true, head_sent = false;
    const auto send_head = [&] {
      if (head_sent) return;
      head_sent = true;
      sent_ok = send(c, serialize_head(res, std::string::npos, chunked, keep_alive));
    };
    bool done = false;
    size_t offset = 0;
    ChunkSink sink;
    sink.write = [&](const char* data, size_t size) {
      if (!sent_ok) return false;
      if (size == 0) return true;
      send_head();
      if (!sent_ok) return false;
      std::string framed;
      if (chunked) {
        framed = fmt::format("{:x}\r\n", size);
        framed.append(data, size);
        framed += "\r\n";
      } else {
        framed.assign(data, size);
      }
      sent_ok = send(c, std::move(framed));
      if (sent_ok) offset += size;
      return sent_ok;
    };
    sink.is_writable = [&] {
      std::lock_guard lock(c->mu);
      return sent_ok && !c->closed;
    };
    sink.done = [&] { done = true; };
    try {
      while (sent_ok && !done) {
        if (!res.provider(offset, sink)) break;
      }
    } catch (const std::exception& e) {  // the answer is cut off: the connection closes
      fmt::print(stderr, "[inferd] a streamed answer failed: {}\n", e.what());
      done = false;
    }
    if (done) send_head();
    if (done && chunked && sent_ok) sent_ok = send(c, "0\r\n\r\n");
    const bool complete = done && sent_ok;
    if (res.releaser) res.releaser(complete);
    return complete;
  }

  // Queues bytes for the I/O thread; waits while the client is behind by kMaxPendingOutput.
  // false: the connection is closed (or the client read nothing for the write timeout).
  bool send(const ConnectionPtr& c, std::string data) {
    std::unique_lock lock(c->mu);
    const auto give_up = Clock::now() + seconds(limits.write_timeout_s);
    while (!c->closed && c->pending.size() >= kMaxPendingOutput) {
      if (c->drained.wait_until(lock, give_up) == std::cv_status::timeout) {
        lock.unlock();
        asio::post(io, [this, c] { close(c); });
        return false;
      }
    }
    if (c->closed) return false;
    c->pending += data;
    if (!c->flushing) {
      c->flushing = true;
      asio::post(io, [this, c] { flush(c); });
    }
    return true;
  }

  // Runs on a handler thread when its answer is written (or abandoned).
  void finish(const ConnectionPtr& c, bool keep_alive) {
    bool idle = false;
    {
      std::lock_guard lock(c->mu);
      c->finished = true;
      c->keep_alive_after = keep_alive;
      idle = !c->flushing;
    }
    if (idle) asio::post(io, [this, c] { on_answer_sent(c); });
  }

  void flush(const ConnectionPtr& c) {
    if (c->phase == Phase::kClosed) return;
    {
      std::lock_guard lock(c->mu);
      c->in_flight.swap(c->pending);
      c->pending.clear();
    }
    c->drained.notify_all();
    arm(c, limits.write_timeout_s);
    asio::async_write(c->socket, asio::buffer(c->in_flight), [this, c](error_code ec, size_t) {
      if (c->phase == Phase::kClosed) return;
      if (ec) return close(c);
      bool more = false, answered = false;
      {
        std::lock_guard lock(c->mu);
        more = !c->pending.empty();
        if (!more) c->flushing = false;
        answered = !more && c->finished;
      }
      c->drained.notify_all();
      if (more) return flush(c);
      disarm(c);
      if (answered) on_answer_sent(c);
    });
  }

  void on_answer_sent(const ConnectionPtr& c) {
    if (c->phase != Phase::kHandling) return;
    bool keep_alive = false;
    {
      std::lock_guard lock(c->mu);
      keep_alive = c->keep_alive_after;
      c->finished = false;
    }
    if (!keep_alive || stopping.load()) {
      error_code ec;
      c->socket.shutdown(tcp::socket::shutdown_send, ec);
      return close(c);
    }
    if (c->reading_ahead) {
      // One read at a time: the pending one is cancelled, and its handler starts the next
      // request (parsing first what was read ahead).
      c->resume_after_read = true;
      error_code ec;
      c->socket.cancel(ec);
      return;
    }
    start_request(c);
  }

  // --- life --------------------------------------------------------------------------------

  void watch_for_stop() {
    stop_poll.expires_after(std::chrono::milliseconds(100));
    stop_poll.async_wait([this](error_code ec) {
      if (ec) return;
      if (!stopping.load()) return watch_for_stop();
      error_code ignored;
      for (tcp::acceptor& a : acceptors) a.close(ignored);
      while (!open.empty()) close(open.front());
      io.stop();
    });
  }
};

HttpTransport::HttpTransport(const HttpRoutes& routes, HttpLimits limits)
    : impl_(std::make_unique<Impl>(routes, limits)) {}

HttpTransport::~HttpTransport() {
  impl_->light.join();
  impl_->heavy.join();
}

int HttpTransport::max_connections() const {
  return impl_->limits.max_connections;
}

int HttpTransport::bind(const std::vector<std::string>& hosts, int port) {
  Impl& impl = *impl_;
  for (const std::string& host : hosts) {
    error_code ec;
    asio::ip::address address = asio::ip::make_address(host, ec);
    if (ec) {  // a name ("localhost"): its first address, as getaddrinfo orders them
      tcp::resolver resolver(impl.io);
      const auto found = resolver.resolve(host, "", tcp::resolver::passive, ec);
      if (ec || found.empty())
        fail("--host '{}' is neither an IP address nor a name this machine resolves", host);
      address = found.begin()->endpoint().address();
    }
    tcp::acceptor acceptor(impl.io);
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
    acceptor.open(endpoint.protocol(), ec);
    if (!ec) acceptor.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec && address.is_v6()) acceptor.set_option(asio::ip::v6_only(true), ec);
    if (!ec) acceptor.bind(endpoint, ec);
    // The kernel's cap (net.core.somaxconn) bounds the backlog: bursts of connections wait
    // there instead of being refused.
    if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
    if (ec)
      fail("cannot bind {}:{} ({}: in use, or not an address of this machine)", host, port,
           ec.message());
    if (port == 0) port = acceptor.local_endpoint().port();
    impl.acceptors.push_back(std::move(acceptor));
  }
  return port;
}

void HttpTransport::run() {
  Impl& impl = *impl_;
  for (tcp::acceptor& acceptor : impl.acceptors) impl.accept(acceptor);
  impl.watch_for_stop();
  impl.io.run();
  // Handlers still running see their connections closed at their next write.
  impl.light.join();
  impl.heavy.join();
}

void HttpTransport::stop() {
  impl_->stopping.store(true);
}

}  // namespace inferd::server

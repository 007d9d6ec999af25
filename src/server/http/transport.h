// The HTTP/1.1 transport of `inferd serve` (Boost.Beast's parser over Asio): one event-driven I/O
// thread owns every socket, so an idle, stalled or trickling connection costs a few kilobytes
// and no thread. Only a request read whole, within every limit, reaches a handler thread.
//
// Limits, each answered at once and the connection closed:
//   header bytes or header count over the limit: 431; a malformed or contradictory
//   Content-Length: 400; a body over --max-body-bytes, Content-Length or chunked alike, counted
//   while it arrives: 413 before the rest is read; a compressed body: 415; headers not complete
//   within the header timeout, or a body within the body timeout: 408; more bodies held in
//   memory than the budget: 503.
// Connections: at most `max_connections` (at the cap, the oldest one still waiting for its
// request is closed to make room), at most `max_connections_per_client` from one address.
// Responses: a handler writes through a bounded buffer flushed by the I/O thread; a client that
// reads nothing for the write timeout is closed, and its handler sees a failed write.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "server/http/routes.h"

namespace inferd::server {

struct HttpLimits {
  size_t max_body_bytes = 8 << 20;
  size_t max_header_bytes = 16 << 10;  // request line and headers together
  int max_headers = 100;
  double header_timeout_s = 10;  // from the wait's start (connect, or the previous answer's end)
  double body_timeout_s = 60;    // from the end of the headers
  double write_timeout_s = 60;   // a response write that makes no progress this long: closed
  int max_connections = 16384;   // lowered to what the open-file limit allows
  int max_connections_per_client = 512;
  int handler_threads = 128;  // requests handled at once (a streamed one holds its thread)
};

class HttpTransport {
 public:
  HttpTransport(const HttpRoutes& routes, HttpLimits limits);
  ~HttpTransport();
  // Listens on every host at `port` (0: a free port, then shared by the others). Returns the
  // port; an inferd::Error naming the address that cannot be bound.
  int bind(const std::vector<std::string>& hosts, int port);
  // Serves until stop().
  void run();
  // Safe from a signal handler: run() returns within a fraction of a second.
  void stop();
  // The connection cap in force (after the open-file limit).
  int max_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace inferd::server

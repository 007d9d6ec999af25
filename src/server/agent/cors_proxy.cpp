#include "server/agent/cors_proxy.h"

#include <openssl/ssl.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <chrono>
#include <limits>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/http/json_answer.h"
#include "util/error.h"
#include "util/hex.h"

namespace inferd::server {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

constexpr auto kConnectTimeout = 10s;
// A remote MCP server may keep an event stream open and quiet for long: llama-server waits
// ten minutes between reads, so does this.
constexpr auto kIdleTimeout = 600s;
constexpr int kMaxRedirects = 5;
constexpr std::string_view kHeaderPrefix = "x-llama-server-proxy-header-";

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 &&
               hex_digit(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// Runs the io_context until the operation started on it completes (the stream's expiry
// cancels it when it takes too long).
beast::error_code run(asio::io_context& io, beast::error_code& ec) {
  io.restart();
  io.run();
  return ec;
}

// One exchange with the remote server over a plain or TLS stream: the request sent, the
// answer's head read, then its body in pieces as the client takes them.
class RemoteAnswer {
 public:
  virtual ~RemoteAnswer() = default;
  virtual const http::response_header<>& head() = 0;
  // Appends the next piece of the body; false at its end (or on an error after the head).
  virtual bool next(std::string& out) = 0;
};

template <typename Stream>
class Exchange : public RemoteAnswer {
 public:
  // `tls`: the TLS context for an ssl_stream, unused for a plain one.
  static std::unique_ptr<Exchange> make(asio::ssl::context* tls) {
    return std::unique_ptr<Exchange>(new Exchange(tls));
  }

  Stream& stream() { return stream_; }
  asio::io_context& io() { return io_; }

  beast::tcp_stream& tcp() { return beast::get_lowest_layer(stream_); }

  void send(http::request<http::string_body>& request) {
    beast::error_code ec;
    tcp().expires_after(kIdleTimeout);
    http::async_write(stream_, request, [&ec](beast::error_code e, size_t) { ec = e; });
    if (run(io(), ec)) fail("cannot send the request: {}", ec.message());
    tcp().expires_after(kIdleTimeout);
    http::async_read_header(stream_, buffer_, parser_,
                            [&ec](beast::error_code e, size_t) { ec = e; });
    if (run(io(), ec)) fail("no answer: {}", ec.message());
  }

  const http::response_header<>& head() override { return parser_.get(); }

  bool next(std::string& out) override {
    if (parser_.is_done()) return false;
    std::array<char, 16384> piece;
    parser_.get().body().data = piece.data();
    parser_.get().body().size = piece.size();
    beast::error_code ec;
    tcp().expires_after(kIdleTimeout);
    http::async_read(stream_, buffer_, parser_, [&ec](beast::error_code e, size_t) { ec = e; });
    run(io(), ec);
    if (ec == http::error::need_buffer) ec = {};
    out.append(piece.data(), piece.size() - parser_.get().body().size);
    return !ec && (!parser_.is_done() || !out.empty());
  }

 private:
  explicit Exchange(asio::ssl::context* tls) : stream_(make_stream(io_, tls)) {
    // Streamed through, never held whole: no limit. (Not boost::none: Boost 1.74 compares the
    // length against an empty optional and reports every body as over the limit.)
    parser_.body_limit(std::numeric_limits<std::uint64_t>::max());
  }
  static Stream make_stream(asio::io_context& io, asio::ssl::context* tls) {
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      (void)tls;
      return Stream(io);
    } else {
      return Stream(io, *tls);
    }
  }

  asio::io_context io_;  // before stream_, which is built on it
  Stream stream_;
  beast::flat_buffer buffer_;
  http::response_parser<http::buffer_body> parser_;
};

using PlainExchange = Exchange<beast::tcp_stream>;
using TlsExchange = Exchange<beast::ssl_stream<beast::tcp_stream>>;

void connect(beast::tcp_stream& stream, asio::io_context& io, const ProxyUrl& url) {
  beast::error_code ec;
  tcp::resolver resolver(io);
  tcp::resolver::results_type endpoints;
  resolver.async_resolve(url.host, std::to_string(url.port),
                         [&](beast::error_code e, tcp::resolver::results_type r) {
                           ec = e;
                           endpoints = std::move(r);
                         });
  if (run(io, ec)) fail("cannot resolve {}: {}", url.host, ec.message());
  stream.expires_after(kConnectTimeout);
  stream.async_connect(endpoints, [&ec](beast::error_code e, const tcp::endpoint&) { ec = e; });
  if (run(io, ec)) fail("cannot connect to {}:{}: {}", url.host, url.port, ec.message());
}

http::request<http::string_body> make_request(const HttpRequest& req, const ProxyUrl& url,
                                              bool as_get) {
  http::request<http::string_body> out;
  out.method(as_get ? http::verb::get : http::verb::post);
  out.target(url.target);
  out.version(11);
  const bool default_port = url.port == (url.https ? 443 : 80);
  out.set(http::field::host,
          (url.host.find(':') != std::string::npos ? "[" + url.host + "]" : url.host) +
              (default_port ? "" : ":" + std::to_string(url.port)));
  for (const auto& [name, value] : req.headers) {
    const std::string key = lower(name);
    if (!key.starts_with(kHeaderPrefix) || key.size() == kHeaderPrefix.size()) continue;
    const std::string forwarded = key.substr(kHeaderPrefix.size());
    // Framing is this connection's own, and the body is relayed as it comes (no compression).
    if (forwarded == "host" || forwarded == "content-length" || forwarded == "transfer-encoding" ||
        forwarded == "accept-encoding" || forwarded == "connection")
      continue;
    out.set(forwarded, value);
  }
  if (!as_get) {
    if (out.find(http::field::content_type) == out.end()) {
      const std::string type = req.get_header_value("Content-Type");
      if (!type.empty()) out.set(http::field::content_type, type);
    }
    out.body() = req.body;
    out.prepare_payload();
  }
  return out;
}

// The client TLS settings of every https request: certificates from the system's store, read
// once (a context may serve several connections and threads at once).
asio::ssl::context& tls_context() {
  static asio::ssl::context context = [] {
    asio::ssl::context made(asio::ssl::context::tls_client);
    made.set_default_verify_paths();
    made.set_verify_mode(asio::ssl::verify_peer);
    return made;
  }();
  return context;
}

std::unique_ptr<RemoteAnswer> open(const HttpRequest& req, const ProxyUrl& url, bool as_get) {
  http::request<http::string_body> request = make_request(req, url, as_get);
  if (!url.https) {
    auto exchange = PlainExchange::make(nullptr);
    connect(exchange->stream(), exchange->io(), url);
    exchange->send(request);
    return exchange;
  }
  auto exchange = TlsExchange::make(&tls_context());
  connect(exchange->tcp(), exchange->io(), url);
  // The name the certificate must carry, and SNI for servers with several.
  if (!SSL_set_tlsext_host_name(exchange->stream().native_handle(), url.host.c_str()))
    fail("cannot set the TLS server name {}", url.host);
  exchange->stream().set_verify_callback(asio::ssl::host_name_verification(url.host));
  beast::error_code ec;
  exchange->tcp().expires_after(kConnectTimeout);
  exchange->stream().async_handshake(asio::ssl::stream_base::client,
                                     [&ec](beast::error_code e) { ec = e; });
  if (run(exchange->io(), ec)) fail("TLS with {} failed: {}", url.host, ec.message());
  exchange->send(request);
  return exchange;
}

// Headers of the remote answer that describe its own connection, not the content.
bool hop_by_hop(const std::string& name) {
  return name == "connection" || name == "keep-alive" || name == "transfer-encoding" ||
         name == "content-length" || name == "content-type" || name == "upgrade" ||
         name == "proxy-authenticate" || name == "te" || name == "trailer" ||
         name.starts_with("access-control-");
}

}  // namespace

std::optional<std::string> query_parameter(std::string_view target, std::string_view name) {
  const size_t question = target.find('?');
  if (question == std::string_view::npos) return std::nullopt;
  std::string_view rest = target.substr(question + 1);
  while (!rest.empty()) {
    const size_t amp = rest.find('&');
    const std::string_view pair = rest.substr(0, amp);
    rest = amp == std::string_view::npos ? std::string_view() : rest.substr(amp + 1);
    const size_t eq = pair.find('=');
    if (percent_decode(pair.substr(0, eq)) != name) continue;
    return eq == std::string_view::npos ? std::string() : percent_decode(pair.substr(eq + 1));
  }
  return std::nullopt;
}

ProxyUrl parse_proxy_url(std::string_view url) {
  ProxyUrl out;
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) fail("'{}' is not an http(s) URL", url);
  const std::string scheme = lower(url.substr(0, scheme_end));
  if (scheme != "http" && scheme != "https") fail("the scheme '{}' is not http or https", scheme);
  out.https = scheme == "https";
  std::string_view rest = url.substr(scheme_end + 3);
  const size_t path_start = rest.find_first_of("/?#");
  std::string_view authority = rest.substr(0, path_start);
  out.target = path_start == std::string_view::npos ? "/" : std::string(rest.substr(path_start));
  if (const size_t hash = out.target.find('#'); hash != std::string::npos) out.target.resize(hash);
  if (out.target.empty() || out.target[0] != '/') out.target.insert(0, "/");
  if (authority.find('@') != std::string_view::npos)
    fail("credentials in the URL are not forwarded (name an Authorization header instead)");
  std::string_view port;
  if (authority.starts_with("[")) {
    const size_t close = authority.find(']');
    if (close == std::string_view::npos) fail("'{}' has an unclosed IPv6 address", url);
    out.host = std::string(authority.substr(1, close - 1));
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':') fail("'{}' has a bad host", url);
      port = authority.substr(close + 2);
    }
  } else {
    const size_t colon = authority.find(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) port = authority.substr(colon + 1);
  }
  if (out.host.empty()) fail("'{}' has no host", url);
  out.port = out.https ? 443 : 80;
  if (!port.empty()) {
    int value = 0;
    for (const char c : port) {
      if (c < '0' || c > '9' || value > 65535) fail("'{}' has a bad port", url);
      value = value * 10 + (c - '0');
    }
    if (value < 1 || value > 65535) fail("'{}' has a bad port", url);
    out.port = value;
  }
  return out;
}

void forward_request(const HttpRequest& req, HttpResponse& res) {
  const std::optional<std::string> url_text = query_parameter(req.target, "url");
  if (!url_text || url_text->empty()) {
    send_error(res, 400, "/cors-proxy needs ?url=http(s)://...", "url");
    return;
  }
  ProxyUrl url;
  try {
    url = parse_proxy_url(*url_text);
  } catch (const Error& e) {
    send_error(res, 400, e.what(), "url");
    return;
  }
  std::shared_ptr<RemoteAnswer> answer;
  bool as_get = req.method != "POST";
  try {
    for (int redirects = 0;; ++redirects) {
      answer = open(req, url, as_get);
      const unsigned status = answer->head().result_int();
      const auto location = answer->head().find(http::field::location);
      if (status < 301 || status > 308 || status == 304 || status == 305 || status == 306 ||
          location == answer->head().end() || redirects == kMaxRedirects)
        break;
      const std::string next(location->value());
      url = next.starts_with("/") ? ProxyUrl{url.https, url.host, url.port, next}
                                  : parse_proxy_url(next);
      if (status == 303) as_get = true;
    }
  } catch (const Error& e) {
    send_error(res, 502, fmt::format("{}: {}", *url_text, e.what()), "url");
    return;
  }
  res.status = static_cast<int>(answer->head().result_int());
  std::string type = "application/octet-stream";
  for (const auto& field : answer->head()) {
    const std::string original(field.name_string());
    const std::string name = lower(original);
    if (name == "content-type") type = std::string(field.value());
    if (!hop_by_hop(name)) res.set_header(original, std::string(field.value()));
  }
  if (res.status == 204 || res.status == 304) {
    res.set_content("", type);
    return;
  }
  res.set_chunked_content_provider(type, [answer](size_t, ChunkSink& sink) {
    std::string piece;
    const bool more = answer->next(piece);
    if (!piece.empty() && !(sink.is_writable() && sink.write(piece.data(), piece.size())))
      return false;
    if (!more) sink.done();
    return more;
  });
}

}  // namespace inferd::server

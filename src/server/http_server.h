// The OpenAI-compatible HTTP front end: routes, authentication, streaming (SSE) and
// non-streaming responses, disconnect detection, over server/http/transport.h (which enforces
// the connection and request limits). It feeds the EngineLoop.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "agent/tool_set.h"
#include "server/api/embeddings.h"
#include "server/api/openai_request.h"
#include "server/api/vertex.h"
#include "server/engine_loop.h"
#include "server/http/transport.h"
#include "server/metrics.h"

namespace inferd::server {

struct ServerOptions {
  std::string host = "127.0.0.1";  // or several, comma-separated, all on `port`
  int port = 8080;
  std::string api_key;  // empty: no authentication
  HttpLimits http;      // body and header limits, timeouts, connection caps, handler threads
  // GET / serves the chat page (server/web_assets.h). Its files hold no data, so they are
  // served without the API key; the page asks for the key when the API answers 401.
  bool webui = true;
  // Browser origins allowed to call the API (server/http/cors.h): comma-separated; empty:
  // localhost.
  std::string cors_origins;
  // For llama-server's GET /props.
  std::string model_path;
  int total_slots = 1;   // sequences served at once
  bool metrics = true;   // GET /metrics (--no-metrics: 501, as llama-server without --metrics)
  bool slots = false;    // GET /slots (--slots; off by default, as in llama-server)
  bool verbose = false;  // chat answers carry "__verbose" (the rendered prompt), as with -v there
  std::string chat_template;  // the template's source, empty without one
  // --embedding, --pooling, --reranking: the embedding and rerank routes (server/api/embeddings.h).
  EmbeddingOptions embeddings;
  // Vertex AI's prediction route, when the environment asks for it (server/api/vertex.h).
  VertexSettings vertex;
  // GET/POST /tools (server/agent/agent_routes.h); nullptr: no tools, the routes answer 403.
  agent::ToolSet* tools = nullptr;
  bool cors_proxy = false;  // --ui-mcp-proxy: GET/POST /cors-proxy
  // GET/POST /lora-adapters (server/api/lora_adapters.h); also ParseContext::lora. null: none.
  LoraRegistry* lora = nullptr;
};

class HttpServer {
 public:
  HttpServer(EngineLoop& loop, ServerMetrics& metrics, ParseContext context, ServerOptions options);
  ~HttpServer();
  // Blocks serving until stop(); an inferd::Error when the address cannot be bound.
  void listen();
  void stop();
  // The port actually bound (useful with port 0).
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace inferd::server

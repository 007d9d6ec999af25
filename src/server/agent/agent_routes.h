// llama-server's agent routes: GET /tools (the tools on offer) and POST /tools (call one,
// answered whole or streamed as server-sent events), and GET/POST /cors-proxy (the chat page's
// way to reach a remote MCP server past the browser's same-origin rule). Both are off unless
// the server is started with them (--tools / an MCP config, --ui-mcp-proxy): 403 otherwise.
//
// They act with the server's rights (commands, files, requests to other hosts), so beyond the
// API key every request that carries an Origin the CORS policy does not allow is refused: a
// page elsewhere could otherwise send a "simple" POST (no preflight) through its visitor's
// browser, and the call would run even though the page never reads the answer.
#pragma once

#include <functional>

#include "agent/tool_set.h"
#include "server/http/message.h"
#include "server/http/routes.h"

namespace inferd::server {

struct AgentRouteHooks {
  // Answers 401 into res and returns false without the API key.
  std::function<bool(const HttpRequest&, HttpResponse&)> authorized;
  // Whether a browser page of this origin may call the server (server/http/cors.h).
  std::function<bool(std::string_view origin)> origin_allowed;
};

// `tools`: nullptr when no tool is configured. `cors_proxy`: --ui-mcp-proxy.
void add_agent_routes(HttpRoutes& routes, agent::ToolSet* tools, bool cors_proxy,
                      AgentRouteHooks hooks);

}  // namespace inferd::server

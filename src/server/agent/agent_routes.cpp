#include "server/agent/agent_routes.h"

#include <exception>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "server/agent/cors_proxy.h"
#include "server/api/openai_request.h"
#include "server/http/json_answer.h"
#include "server/json/request_json.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;

// The key, and for a browser's request an origin the policy allows. False: answered.
bool admitted(const AgentRouteHooks& hooks, const HttpRequest& req, HttpResponse& res) {
  if (!hooks.authorized(req, res)) return false;
  const std::string origin = req.get_header_value("Origin");
  if (!origin.empty() && !hooks.origin_allowed(origin)) {
    send_error(
        res, 403,
        fmt::format("origin {} may not call {} (allow it with --cors-origins)", origin, req.path));
    return false;
  }
  return true;
}

struct ToolRequest {
  agent::Tool* tool = nullptr;
  agent::ToolCall call;
  bool stream = false;
};

// POST /tools' body: {"tool": NAME, "params": {...}, "stream": bool}. The working directory and
// the runtime come from the headers (or the server's --tools-runtime), never from the model's
// params. Throws ApiError.
ToolRequest parse_tool_request(const agent::ToolSet& tools, const HttpRequest& req) {
  const json body = parse_request_json(req.body);
  if (!body.is_object()) throw ApiError(400, "the body must be a JSON object");
  if (!body.contains("tool") || !body["tool"].is_string())
    throw ApiError(400, "\"tool\" (the tool's name, a string) is required", "tool");
  ToolRequest out;
  const std::string name = body["tool"].get<std::string>();
  out.tool = tools.find(name);
  if (out.tool == nullptr) throw ApiError(404, fmt::format("no tool named '{}'", name), "tool");
  if (body.contains("params")) {
    if (!body["params"].is_object()) throw ApiError(400, "\"params\" must be an object", "params");
    out.call.params = nlohmann::json(body["params"]);
  } else {
    out.call.params = nlohmann::json::object();
  }
  // Set by the client around the model, never by the model: where the tool runs, and (the chat
  // page's x-resp-type) whether read_file answers in base64.
  out.call.params.erase("cwd");
  out.call.params.erase("runtime");
  out.call.params.erase("resp_type");
  if (const std::string type = req.get_header_value("x-resp-type"); !type.empty())
    out.call.params["resp_type"] = type;
  if (body.contains("stream")) {
    if (!body["stream"].is_boolean()) throw ApiError(400, "\"stream\" must be a boolean", "stream");
    out.stream = body["stream"].get<bool>();
  }
  if (out.stream && !out.tool->can_stream())
    throw ApiError(404, fmt::format("the tool '{}' cannot stream its output", name), "stream");
  out.call.cwd = req.get_header_value("x-tool-cwd");
  out.call.runtime = req.get_header_value("x-tool-runtime");
  if (out.call.runtime.empty()) out.call.runtime = tools.default_runtime();
  out.call.stopping = tools.stopping();
  return out;
}

std::string sse_event(const json& event) {
  return "data: " + event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

// A streamed call: {"chunk": TEXT} events as the tool writes, then {"done": true} (with
// "error" when the call failed). The tool runs on this handler's thread, in the provider's
// first call; a client that leaves makes on_output return false, and the tool stops.
void stream_tool(HttpResponse& res, std::shared_ptr<ToolRequest> request) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider("text/event-stream", [request](size_t, ChunkSink& sink) {
    request->call.on_output = [&sink](std::string_view chunk) {
      const std::string event = sse_event({{"chunk", chunk}});
      return sink.is_writable() && sink.write(event.data(), event.size());
    };
    json done = {{"done", true}};
    try {
      const json result = request->tool->invoke(request->call);
      if (result.contains("error")) done["error"] = result["error"];
    } catch (const std::exception& e) {
      done["error"] = e.what();
    }
    const std::string event = sse_event(done);
    if (sink.is_writable() && sink.write(event.data(), event.size())) sink.done();
    return false;
  });
}

void tool_routes(HttpRoutes& routes, agent::ToolSet* tools, const AgentRouteHooks& hooks) {
  routes.get("/tools", [tools, hooks](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(hooks, req, res)) return;
    send_json(res, 200, tools->list());
  });
  routes.post("/tools", [tools, hooks](const HttpRequest& req, HttpResponse& res) {
    if (!admitted(hooks, req, res)) return;
    std::shared_ptr<ToolRequest> request;
    try {
      request = std::make_shared<ToolRequest>(parse_tool_request(*tools, req));
    } catch (const ApiError& e) {
      send_json(res, e.status, e.body());
      return;
    } catch (const nlohmann::json::exception& e) {
      const ApiError error = wrong_type(e);
      send_json(res, error.status, error.body());
      return;
    }
    if (request->stream) {
      stream_tool(res, std::move(request));
      return;
    }
    try {
      send_json(res, 200, request->tool->invoke(request->call));
    } catch (const std::exception& e) {
      // The server's side of the call failed (agent::ToolFailure: an unknown runtime, a
      // process that cannot start); the tool's own failures are answers of their own.
      send_error(res, 500, e.what());
    }
  });
}

void refuse_routes(HttpRoutes& routes, const std::string& path, const std::string& why,
                   const AgentRouteHooks& hooks) {
  // Behind the key like every other route: without it a client learns nothing, not even that.
  const auto refuse = [why, hooks](const HttpRequest& req, HttpResponse& res) {
    if (hooks.authorized(req, res)) send_error(res, 403, why);
  };
  routes.get(path, refuse);
  routes.post(path, refuse);
}

}  // namespace

void add_agent_routes(HttpRoutes& routes, agent::ToolSet* tools, bool cors_proxy,
                      AgentRouteHooks hooks) {
  if (tools != nullptr) {
    tool_routes(routes, tools, hooks);
  } else {
    refuse_routes(routes, "/tools",
                  "the server's tools are off (start it with --tools, --mcp-servers-json or "
                  "--mcp-servers-config)",
                  hooks);
  }
  if (cors_proxy) {
    const auto proxy = [hooks](const HttpRequest& req, HttpResponse& res) {
      if (!admitted(hooks, req, res)) return;
      forward_request(req, res);
    };
    routes.get("/cors-proxy", proxy);
    routes.post("/cors-proxy", proxy);
  } else {
    refuse_routes(routes, "/cors-proxy", "the CORS proxy is off (start with --ui-mcp-proxy)",
                  hooks);
  }
}

}  // namespace inferd::server

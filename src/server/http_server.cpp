#include "server/http_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "server/agent/agent_routes.h"
#include "server/api/anthropic.h"
#include "server/api/infill.h"
#include "server/api/llama_native.h"
#include "server/api/openai_response.h"
#include "server/api/responses.h"
#include "server/http/cors.h"
#include "server/http/json_answer.h"
#include "server/http/routes.h"
#include "server/http/transport.h"
#include "server/json/request_json.h"
#include "server/web_assets.h"
#include "util/comma_list.h"
#include "util/error.h"
#include "util/utf8.h"

namespace inferd::server {
namespace {

using json = nlohmann::ordered_json;
using namespace std::chrono_literals;

// How long a connection waits for output before checking that its client is still there.
constexpr auto kPollInterval = 100ms;
// Silence after which a stream writes a keep-alive (an SSE comment), so proxies and clients with
// idle timeouts see the connection alive; a vanished client is seen by the transport at once.
constexpr auto kKeepAliveInterval = 1000ms;

// Writes a stream's server-sent events and, after a second of silence, a keep-alive comment,
// so a client that left is noticed at the next write. false: the client is gone.
class SseWriter {
 public:
  explicit SseWriter(ChunkSink& sink) : sink_(sink) {}
  bool send(const json& event) {
    const std::string line =
        "data: " + event.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
    quiet_since_ = std::chrono::steady_clock::now();
    return sink_.is_writable() && sink_.write(line.data(), line.size());
  }
  bool keep_alive() {
    if (std::chrono::steady_clock::now() - quiet_since_ <= kKeepAliveInterval) return true;
    quiet_since_ = std::chrono::steady_clock::now();
    return sink_.is_writable() && sink_.write(": keep-alive\n\n", 14);
  }

 private:
  ChunkSink& sink_;
  std::chrono::steady_clock::time_point quiet_since_ = std::chrono::steady_clock::now();
};

// Writes the typed events of Anthropic's and the Responses API's streams ("event: TYPE" before
// each data line, rendered by `render`), and says when a keep-alive is due.
class TypedEventWriter {
 public:
  using Render = std::string (*)(const json& event);
  TypedEventWriter(ChunkSink& sink, Render render) : sink_(sink), render_(render) {}
  bool send(const json& event) {
    const std::string text = render_(event);
    quiet_since_ = std::chrono::steady_clock::now();
    return sink_.is_writable() && sink_.write(text.data(), text.size());
  }
  bool send_all(const std::vector<json>& events) {
    return std::all_of(events.begin(), events.end(), [this](const json& e) { return send(e); });
  }
  bool keep_alive_due() const {
    return std::chrono::steady_clock::now() - quiet_since_ > kKeepAliveInterval;
  }
  bool send_comment(std::string_view text) {
    const std::string line = ": " + std::string(text) + "\n\n";
    quiet_since_ = std::chrono::steady_clock::now();
    return sink_.is_writable() && sink_.write(line.data(), line.size());
  }

 private:
  ChunkSink& sink_;
  Render render_;
  std::chrono::steady_clock::time_point quiet_since_ = std::chrono::steady_clock::now();
};

std::string finish_name(const engine::RequestResult& r) {
  return std::string(engine::finish_reason_name(r.finish_reason));
}

// The n engine requests behind one HTTP request.
struct Generation {
  CompletionRequest request;
  std::vector<std::shared_ptr<StreamChannel>> channels;
  std::vector<ChoiceOutput> choices;
  std::vector<bool> done;
  std::vector<ReasoningSplitter> reasoning;  // per choice, when the answers are split
  std::string error;
  void cancel() {
    for (auto& c : channels) c->cancel();
  }
  bool all_done() const {
    return std::all_of(done.begin(), done.end(), [](bool d) { return d; });
  }
};

}  // namespace

struct HttpServer::Impl {
  EngineLoop& loop;
  ServerMetrics& metrics;
  ParseContext context;
  ServerOptions options;
  LoraRegistry no_lora;  // what the LoRA routes serve when options.lora is null: no adapters
  CorsPolicy cors;
  HttpRoutes http_routes;
  std::unique_ptr<HttpTransport> transport;
  std::atomic<uint64_t> next_id{1};
  const int64_t started_unix = static_cast<int64_t>(std::time(nullptr));
  std::vector<std::string> hosts;  // --host takes a comma-separated list
  int bound_port = 0;

  Impl(EngineLoop& l, ServerMetrics& m, ParseContext c, ServerOptions o)
      : loop(l),
        metrics(m),
        context(std::move(c)),
        options(std::move(o)),
        cors(options.cors_origins) {}

  // The key as OpenAI's clients send it (Authorization: Bearer) or as Anthropic's do
  // (x-api-key), on any route, as llama-server takes both.
  bool authorized(const HttpRequest& req, HttpResponse& res) {
    if (options.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + options.api_key) return true;
    if (req.has_header("x-api-key") && req.get_header_value("x-api-key") == options.api_key)
      return true;
    metrics.record_rejected(401);
    const ApiError e(401, "Incorrect or missing API key (Authorization: Bearer ... or x-api-key)",
                     "", "authentication_error", "invalid_api_key");
    // Anthropic's routes answer in Anthropic's error shape, which its SDKs read.
    send_json(res, 401, req.path.starts_with("/v1/messages") ? anthropic_error_body(e) : e.body());
    return false;
  }

  void fail_with(HttpResponse& res, const ApiError& e) {
    metrics.record_rejected(e.status);
    send_json(res, e.status, e.body());
  }

  // What a request gets when the engine's queue (--max-queue) is full.
  static ApiError queue_full() {
    return ApiError(429, "the server's queue is full; retry later", "", "rate_limit_exceeded",
                    "queue_full");
  }

  LoraRegistry& lora_registry() { return options.lora != nullptr ? *options.lora : no_lora; }

  // Runs parse(); a bad request (ApiError, or a JSON value of the wrong type) is answered and
  // false returned.
  template <typename Parse>
  bool parsed(HttpResponse& res, Parse parse) {
    try {
      parse();
      return true;
    } catch (const ApiError& e) {
      fail_with(res, e);
    } catch (const json::exception& e) {
      fail_with(res, wrong_type(e));
    }
    return false;
  }

  static json parse_body(const HttpRequest& req) { return parse_request_json(req.body); }

  // Drains what a choice has produced; records it if finished. Returns its new text (content)
  // and reasoning since the last call.
  ReasoningSplitter::Pieces collect(Generation& g, int index, ChannelBatch& batch) {
    ChoiceOutput& c = g.choices[static_cast<size_t>(index)];
    ReasoningSplitter::Pieces fresh;
    if (g.reasoning.empty()) {
      fresh.content = batch.text;
    } else {
      ReasoningSplitter& split = g.reasoning[static_cast<size_t>(index)];
      fresh = split.push(batch.text);
      if (batch.result) {
        ReasoningSplitter::Pieces tail = split.flush();
        fresh.reasoning += tail.reasoning;
        fresh.content += tail.content;
      }
    }
    c.text += fresh.content;
    c.reasoning += fresh.reasoning;
    c.tokens.insert(c.tokens.end(), batch.tokens.begin(), batch.tokens.end());
    if (batch.result && !batch.result->beams.empty()) {  // one beam search: a choice per beam
      const engine::RequestResult& r = *batch.result;
      g.done[static_cast<size_t>(index)] = true;
      for (size_t j = 0; j < g.choices.size(); ++j) {
        ChoiceOutput& choice = g.choices[j];
        const bool found = j < r.beams.size();
        choice.text = found ? r.beams[j].text : std::string();
        choice.finish_reason = std::string(
            engine::finish_reason_name(found ? r.beams[j].finish_reason : r.finish_reason));
        choice.prompt_tokens = r.stats.prompt_tokens;
        choice.cached_tokens = r.stats.cached_tokens;
        choice.completion_tokens = found ? std::ssize(r.beams[j].tokens) : 0;
        choice.stats = r.stats;
      }
    } else if (batch.result) {
      const engine::RequestResult& r = *batch.result;
      g.done[static_cast<size_t>(index)] = true;
      c.finish_reason = finish_name(r);
      c.prompt_tokens = r.stats.prompt_tokens;
      c.cached_tokens = r.stats.cached_tokens;
      c.completion_tokens = r.stats.completion_tokens;
      c.stats = r.stats;
      c.stop_word = r.stop_word;
      c.prompt_logprobs = r.prompt_logprobs;
      if (r.finish_reason == engine::FinishReason::kError) g.error = r.error;
    }
    return fresh;
  }

  // Waits on the choices in turn; returns the batches that arrived.
  std::vector<ChannelBatch> poll(Generation& g) {
    std::vector<ChannelBatch> batches(g.channels.size());
    const auto wait = g.channels.size() == 1 ? kPollInterval : kPollInterval / 10;
    for (size_t i = 0; i < g.channels.size(); ++i) {
      if (!g.done[i]) batches[i] = g.channels[i]->wait(wait);
    }
    return batches;
  }

  // llama-server's prompt_progress on a stream's chunk (return_progress), with the timings so
  // far when the request asked for timings_per_token.
  static void add_progress(json& event, const engine::PromptProgress& p,
                           const CompletionRequest& request) {
    event["prompt_progress"] = {{"total", p.total},
                                {"cache", p.cached},
                                {"processed", p.processed},
                                {"time_ms", p.elapsed_s * 1000}};
    if (!request.timings_per_token) return;
    ChoiceOutput so_far;
    so_far.stats.prompt_tokens = p.processed;
    so_far.stats.cached_tokens = p.cached;
    so_far.stats.prefill_s = p.elapsed_s;
    event["timings"] = ResponseWriter::timings(so_far);
  }

  bool start(Generation& g) {
    if (g.request.request.beam_width > 0) {  // one engine request makes every choice
      auto channel = std::make_shared<StreamChannel>(&metrics);
      engine::Request r = g.request.request;
      r.output = channel;
      if (!loop.submit(std::move(r))) return false;
      g.channels.push_back(channel);
      g.choices.resize(static_cast<size_t>(g.request.n));
      g.done.push_back(false);
      return true;
    }
    // One engine request: the other choices fork from the first once its prompt is computed.
    engine::Request r = g.request.request;
    for (int i = 0; i < g.request.n; ++i) {
      auto channel = std::make_shared<StreamChannel>(&metrics);
      if (i == 0) {
        r.output = channel;
      } else {
        r.more_outputs.push_back(channel);
      }
      g.channels.push_back(channel);
      g.choices.emplace_back();
      g.done.push_back(false);
      if (g.request.split_reasoning) g.reasoning.push_back(reasoning_splitter(g.request));
    }
    return loop.submit(std::move(r));
  }

  void handle_completion(const HttpRequest& req, HttpResponse& res, bool chat) {
    if (!authorized(req, res)) return;
    auto g = std::make_shared<Generation>();
    std::vector<std::shared_ptr<Generation>> more;  // the other prompts of a list of prompts
    bool verbose = options.verbose;
    if (!parsed(res, [&] {
          json body = parse_body(req);
          if (!chat && body.is_object() && body.contains("prompt")) {
            std::vector<json> prompts = completion_prompts(body["prompt"]);
            if (prompts.size() > 1 && body.value("stream", false) == true)
              throw ApiError(400, "a list of prompts is answered whole: set 'stream' false",
                             "stream");
            for (size_t i = 1; i < prompts.size(); ++i) {
              body["prompt"] = std::move(prompts[i]);
              more.emplace_back(std::make_shared<Generation>())->request =
                  parse_completion(body, false, context);
            }
            body["prompt"] = std::move(prompts[0]);
          }
          g->request = parse_completion(body, chat, context);
          if (body.contains("verbose")) verbose = body["verbose"].get<bool>();
        }))
      return;
    bool started = start(*g);
    for (auto& other : more) started = started && start(*other);
    if (!started) {
      g->cancel();
      for (auto& other : more) other->cancel();
      fail_with(res, queue_full());
      return;
    }
    const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id++);
    const auto created = static_cast<int64_t>(std::time(nullptr));
    auto writer = std::make_shared<ResponseWriter>(g->request, *context.tokenizer, id, created);
    if (!more.empty()) {  // a list of prompts: each one's choices after the previous one's
      more.insert(more.begin(), g);
      std::vector<std::shared_ptr<ResponseWriter>> writers;
      for (const auto& gen : more)
        writers.push_back(
            std::make_shared<ResponseWriter>(gen->request, *context.tokenizer, id, created));
      respond_whole(res, more, [more, writers] {
        json body = writers[0]->full(more[0]->choices);
        for (size_t i = 1; i < more.size(); ++i) {
          json part = writers[i]->full(more[i]->choices);
          for (json& choice : part["choices"]) {
            choice["index"] = body["choices"].size();
            body["choices"].push_back(std::move(choice));
          }
          for (const char* count : {"prompt_tokens", "completion_tokens", "total_tokens"})
            body["usage"][count] =
                body["usage"][count].get<int64_t>() + part["usage"][count].get<int64_t>();
          json& cached = body["usage"]["prompt_tokens_details"]["cached_tokens"];
          cached = cached.get<int64_t>() +
                   part["usage"]["prompt_tokens_details"]["cached_tokens"].get<int64_t>();
        }
        return body;
      });
      return;
    }
    if (g->request.stream) {
      stream(res, g, writer);
    } else {
      respond_whole(res, g, [writer, g, verbose] {
        json body = writer->full(g->choices);
        // llama-server's debugging aid: the prompt as the template rendered it.
        if (verbose) body["__verbose"] = {{"prompt", g->request.prompt_text}};
        return body;
      });
    }
  }

  // llama-server's POST /chat/completions/input_tokens: the length of the prompt a chat request
  // would compute, without computing it.
  void handle_input_tokens(const HttpRequest& req, HttpResponse& res) {
    if (!authorized(req, res)) return;
    parsed(res, [&] {
      json body = parse_body(req);
      if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
      body.erase("max_tokens");
      body.erase("max_completion_tokens");
      const int64_t n = std::ssize(parse_completion(body, true, context).request.prompt);
      send_json(res, 200, {{"input_tokens", n}});
    });
  }

  // llama-server's POST /completion and /completions (server/api/llama_native.h), and /infill
  // (server/api/infill.h), which is one with a prompt made of the code around the cursor.
  void handle_native_completion(const HttpRequest& req, HttpResponse& res, bool infill = false) {
    if (!authorized(req, res)) return;
    auto g = std::make_shared<Generation>();
    std::vector<std::shared_ptr<Generation>> more;  // the other prompts of a list of prompts
    NativeOptions options;
    bool zero_predict = false;
    if (!parsed(res, [&] {
          json body = infill ? infill_to_native(parse_body(req), context) : parse_body(req);
          if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
          if (!body.contains("prompt")) throw ApiError(400, "'prompt' is required", "prompt");
          std::vector<json> prompts = native_prompts(body["prompt"], context);
          if (prompts.size() > 1 && body.value("stream", false) == true)
            throw ApiError(400, "a list of prompts is answered whole: set 'stream' false",
                           "stream");
          for (size_t i = 0; i < prompts.size(); ++i) {
            body["prompt"] = std::move(prompts[i]);
            auto& target = i == 0 ? g : more.emplace_back(std::make_shared<Generation>());
            target->request = parse_completion(native_to_openai(body, context), false,
                                               native_parse_context(body, context));
          }
          options.model = context.model_ids.front();
          options.return_tokens = body.value("return_tokens", false) == true;
          options.n_probs = g->request.logprobs;
          options.post_sampling_probs = g->request.request.post_sampling_probs;
          zero_predict = body.contains("n_predict") && body["n_predict"] == 0;
        }))
      return;
    bool started = start(*g);
    for (auto& other : more) started = started && start(*other);
    if (!started) {
      g->cancel();
      for (auto& other : more) other->cancel();
      fail_with(res, queue_full());
      return;
    }
    const auto final_of = [this, options, zero_predict](const Generation& gen, bool with_content) {
      ChoiceOutput c = gen.choices[0];
      if (zero_predict) {  // the engine sampled one token; n_predict 0 asked for none
        c.text.clear();
        c.tokens.clear();
        c.completion_tokens = 0;
      }
      return native_final(c, gen.request, options, *context.tokenizer, with_content);
    };
    const auto final_object = [g, final_of](bool with_content) {
      return final_of(*g, with_content);
    };
    if (!more.empty()) {  // a list of prompts: a list of answers, in the prompts' order
      more.insert(more.begin(), g);
      respond_whole(res, more, [more, final_of] {
        json answers = json::array();
        for (size_t i = 0; i < more.size(); ++i) {
          answers.push_back(final_of(*more[i], true));
          answers.back()["index"] = i;
        }
        return answers;
      });
      return;
    }
    if (!g->request.stream) {
      respond_whole(res, g, [g, final_object] {
        return g->error.empty() ? final_object(true) : ApiError(400, g->error).body();
      });
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, g, options, final_object, zero_predict](size_t, ChunkSink& sink) {
          SseWriter out(sink);
          const auto send = [&out](const json& event) { return out.send(event); };
          while (!g->all_done()) {
            ChannelBatch batch = poll(*g)[0];
            for (const engine::PromptProgress& p : batch.progress) {
              json event = native_chunk("", {}, options, *context.tokenizer);
              add_progress(event, p, g->request);
              if (!send(event)) return g->cancel(), false;
            }
            const std::vector<TokenInfo> tokens = batch.tokens;
            const bool finished = batch.result.has_value();
            const ReasoningSplitter::Pieces fresh = collect(*g, 0, batch);
            if (finished && !g->error.empty()) {
              send(ApiError(400, g->error).body());
              break;
            }
            if (!zero_predict && (!fresh.content.empty() || !tokens.empty()) &&
                !send(native_chunk(fresh.content, tokens, options, *context.tokenizer)))
              return g->cancel(), false;
            if (finished && !send(final_object(false))) return g->cancel(), false;
            if (!out.keep_alive()) return g->cancel(), false;
          }
          sink.done();
          return true;
        },
        [g](bool) { g->cancel(); });
  }

  void respond_whole(HttpResponse& res, std::shared_ptr<Generation> g,
                     std::function<json()> make_body) {
    respond_whole(res, std::vector{std::move(g)}, std::move(make_body));
  }

  // The body make_body() builds once every generation is done (the first error instead, if
  // one failed). A client that goes away while its request is queued or running is seen by the
  // transport (its socket's end), and its sequences are cancelled.
  void respond_whole(HttpResponse& res, std::vector<std::shared_ptr<Generation>> gens,
                     std::function<json()> make_body) {
    const auto cancel_all = [gens] {
      for (const auto& g : gens) g->cancel();
    };
    res.set_chunked_content_provider(
        "application/json",
        [this, gens, make_body, cancel_all](size_t, ChunkSink& sink) {
          for (const auto& g : gens) {
            while (!g->all_done()) {
              auto batches = poll(*g);
              for (size_t i = 0; i < batches.size(); ++i)
                collect(*g, static_cast<int>(i), batches[i]);
              if (!sink.is_writable()) {
                cancel_all();
                return false;
              }
            }
          }
          json body;
          for (const auto& g : gens) {
            if (!g->error.empty() && body.is_null()) body = ApiError(400, g->error).body();
          }
          if (body.is_null()) body = make_body();
          const std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
          sink.write(text.data(), text.size());
          sink.done();
          return true;
        },
        [cancel_all](bool) { cancel_all(); });
  }

  void stream(HttpResponse& res, std::shared_ptr<Generation> g,
              std::shared_ptr<ResponseWriter> writer) {
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, g, writer, started = false](size_t, ChunkSink& sink) mutable {
          // One writer per call: the transport calls this provider once, and it loops to the end.
          SseWriter out(sink);
          const auto send = [&out](const json& event) { return out.send(event); };
          if (!started && g->request.chat) {
            for (int i = 0; i < g->request.n; ++i) {
              if (!send(writer->role_chunk(i))) return g->cancel(), false;
            }
          }
          if (!started && g->request.echo) {  // the prompt first (its logprobs are not streamed)
            for (int i = 0; i < g->request.n; ++i) {
              if (!send(writer->chunk(i, g->request.prompt_text, {}, {})))
                return g->cancel(), false;
            }
          }
          started = true;
          while (!g->all_done()) {
            auto batches = poll(*g);
            for (size_t i = 0; i < batches.size(); ++i) {
              ChannelBatch& b = batches[i];
              for (const engine::PromptProgress& p : b.progress) {
                json event = g->request.chat ? writer->role_chunk(static_cast<int>(i))
                                             : writer->chunk(static_cast<int>(i), "", {}, {});
                add_progress(event, p, g->request);
                if (!send(event)) return g->cancel(), false;
              }
              const bool had_result = b.result.has_value();
              const bool beams = had_result && !b.result->beams.empty();
              const std::vector<TokenInfo> tokens = b.tokens;
              const ReasoningSplitter::Pieces fresh = collect(*g, static_cast<int>(i), b);
              if (had_result && !g->error.empty()) {
                send(ApiError(400, g->error).body());
                continue;
              }
              if (beams) {  // a beam search's text is known at its end: one chunk per beam
                for (size_t j = 0; j < g->choices.size(); ++j) {
                  const ChoiceOutput& c = g->choices[j];
                  if (!send(writer->chunk(static_cast<int>(j), c.text, {}, c.finish_reason)))
                    return g->cancel(), false;
                }
                continue;
              }
              if (g->request.tools.active() && g->request.chat) {
                // Calls are known when the answer is: the content is held back until then.
                if (!fresh.reasoning.empty() &&
                    !send(writer->chunk(static_cast<int>(i), {}, {}, {}, fresh.reasoning)))
                  return g->cancel(), false;
                if (!had_result) continue;
                for (const json& event :
                     writer->final_tool_chunks(static_cast<int>(i), g->choices[i])) {
                  if (!send(event)) return g->cancel(), false;
                }
                continue;
              }
              if (fresh.content.empty() && fresh.reasoning.empty() && tokens.empty() && !had_result)
                continue;
              const int index = static_cast<int>(i);
              const bool fresh_output =
                  !fresh.content.empty() || !fresh.reasoning.empty() || !tokens.empty();
              if (fresh_output &&
                  !send(writer->chunk(index, fresh.content, tokens, {}, fresh.reasoning)))
                return g->cancel(), false;
              if (!had_result) continue;
              // The finish in a chunk of its own with an empty delta, as OpenAI and
              // llama-server send it; llama-server puts the timings there (its web page reads
              // them), inferd on each choice's finishing chunk.
              json event = writer->chunk(index, {}, {}, g->choices[i].finish_reason);
              event["timings"] = ResponseWriter::timings(g->choices[i]);
              if (!send(event)) return g->cancel(), false;
            }
            if (!out.keep_alive()) return g->cancel(), false;
          }
          if (g->request.include_usage && !send(writer->usage_chunk(g->choices)))
            return g->cancel(), false;
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        },
        [g](bool) { g->cancel(); });
  }

  // llama-server's POST /tokenize: {"content", "add_special" (false), "parse_special" (true),
  // "with_pieces" (false)} -> {"tokens": [id, ...]} or, with pieces, [{"id", "piece"}] where a
  // piece that is not whole UTF-8 is given as its bytes.
  json tokenize_content(const json& body) const {
    if (!body["content"].is_string()) throw ApiError(400, "'content' must be a string", "content");
    const auto flag = [&](const char* name, bool fallback) {
      if (!body.contains(name)) return fallback;
      if (!body[name].is_boolean())
        throw ApiError(400, fmt::format("'{}' must be true or false", name), name);
      return body[name].get<bool>();
    };
    const bool add_special = flag("add_special", false),
               parse_special = flag("parse_special", true);
    const std::vector<int32_t> ids =
        context.tokenizer->encode(body["content"].get<std::string>(), add_special, parse_special);
    if (!flag("with_pieces", false)) return {{"tokens", ids}};
    json tokens = json::array();
    for (const int32_t id : ids) {
      const std::string& piece = context.tokenizer->token_piece(id);
      tokens.push_back(
          {{"id", id}, {"piece", is_valid_utf8(piece) ? json(piece) : bytes_of(piece)}});
    }
    return {{"tokens", tokens}};
  }

  void handle_tokenize(const HttpRequest& req, HttpResponse& res) {
    if (!authorized(req, res)) return;
    try {
      const json body = parse_body(req);
      if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
      check_model(body, context);
      std::vector<int32_t> ids;
      if (body.contains("content")) {  // llama-server's form
        send_json(res, 200, tokenize_content(body));
        return;
      }
      if (body.contains("messages")) {
        json chat = body;
        chat.erase("max_tokens");
        ids = parse_completion(chat, true, context).request.prompt;
      } else {
        if (!body.contains("prompt") || !body["prompt"].is_string())
          throw ApiError(400, "'prompt' must be a string", "prompt");
        const bool add_special = body.value("add_special_tokens", true);
        ids = context.tokenizer->encode(body["prompt"].get<std::string>(), add_special, true);
      }
      send_json(res, 200,
                {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", context.context}});
    } catch (const ApiError& e) {
      fail_with(res, e);
    }
  }

  // llama-server's POST /apply-template: {"messages": [...]} -> {"prompt": "..."}, the text
  // /v1/chat/completions would tokenize, for debugging templates.
  void handle_apply_template(const HttpRequest& req, HttpResponse& res) {
    if (!authorized(req, res)) return;
    try {
      const json body = parse_body(req);
      if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
      check_model(body, context);
      send_json(res, 200, {{"prompt", render_chat_prompt(body, context)}});
    } catch (const ApiError& e) {
      fail_with(res, e);
    }
  }

  // Embedding and rerank requests: one engine request per prompt, all queued at once so the
  // engine computes them in the same steps, answered by `answer` (results in prompt order)
  // once every one is done. Chunked like respond_whole, so a client that leaves cancels them.
  void run_embedding_jobs(HttpResponse& res, std::vector<std::vector<int32_t>> prompts,
                          const std::vector<float>& lora_scales, engine::Pooling pooling,
                          std::function<json(std::vector<engine::RequestResult>&)> answer) {
    struct Jobs {
      std::vector<std::shared_ptr<StreamChannel>> channels;
      std::vector<engine::RequestResult> results;
      void cancel() {
        for (auto& c : channels) c->cancel();
      }
    };
    auto jobs = std::make_shared<Jobs>();
    for (std::vector<int32_t>& prompt : prompts) {
      auto channel = std::make_shared<StreamChannel>(&metrics);
      engine::Request r;
      r.prompt = std::move(prompt);
      r.embed = pooling;
      r.lora_scales = lora_scales;
      r.output = channel;
      if (!loop.submit(std::move(r))) {
        jobs->cancel();
        fail_with(res, queue_full());
        return;
      }
      jobs->channels.push_back(std::move(channel));
    }
    res.set_chunked_content_provider(
        "application/json",
        [jobs, answer](size_t, ChunkSink& sink) {
          std::string error;
          for (const auto& channel : jobs->channels) {
            std::optional<engine::RequestResult> result;
            while (!result) {
              result = channel->wait(kPollInterval).result;
              if (!result && !sink.is_writable()) return jobs->cancel(), false;
            }
            if (result->finish_reason == engine::FinishReason::kError && error.empty())
              error = result->error;
            jobs->results.push_back(std::move(*result));
          }
          const json body = error.empty() ? answer(jobs->results) : ApiError(400, error).body();
          const std::string text = body.dump(-1, ' ', false, json::error_handler_t::replace);
          sink.write(text.data(), text.size());
          sink.done();
          return true;
        },
        [jobs](bool) { jobs->cancel(); });
  }

  // llama-server's POST /embedding, /embeddings (its own answer) and /v1/embeddings (OpenAI's).
  void handle_embeddings(const HttpRequest& req, HttpResponse& res, bool oai) {
    if (!authorized(req, res)) return;
    auto request = std::make_shared<EmbeddingRequest>();
    if (!parsed(res, [&] {
          *request = parse_embedding_request(parse_body(req), oai, options.embeddings, context);
        }))
      return;
    const EmbeddingOptions& o = options.embeddings;
    const bool per_token = o.pooling == engine::Pooling::kNone && !o.rank;
    run_embedding_jobs(res, request->inputs, request->lora_scales, o.pooling,
                       [this, request, per_token](std::vector<engine::RequestResult>& results) {
                         std::vector<EmbeddingOutput> outputs;
                         for (engine::RequestResult& r : results)
                           outputs.push_back({std::move(r.embedding), r.stats.prompt_tokens});
                         return embeddings_response(*request, std::move(outputs), per_token,
                                                    loop.model_config().n_embd,
                                                    context.model_ids.front());
                       });
  }

  // llama-server's POST /rerank and its aliases: a score per (query, document) pair.
  void handle_rerank(const HttpRequest& req, HttpResponse& res) {
    if (!authorized(req, res)) return;
    auto request = std::make_shared<RerankRequest>();
    if (!parsed(res, [&] {
          *request = parse_rerank_request(parse_body(req), options.embeddings, context);
        }))
      return;
    run_embedding_jobs(res, request->inputs, request->lora_scales, engine::Pooling::kLast,
                       [this, request](std::vector<engine::RequestResult>& results) {
                         std::vector<double> scores;
                         std::vector<int64_t> tokens;
                         for (const engine::RequestResult& r : results) {
                           scores.push_back(rerank_score(r.embedding));
                           tokens.push_back(r.stats.prompt_tokens);
                         }
                         return rerank_response(*request, scores, tokens,
                                                context.model_ids.front());
                       });
  }

  void handle_detokenize(const HttpRequest& req, HttpResponse& res) {
    if (!authorized(req, res)) return;
    try {
      const json body = parse_body(req);
      if (!body.is_object() || !body.contains("tokens") || !body["tokens"].is_array())
        throw ApiError(400, "'tokens' must be a list of token ids", "tokens");
      check_model(body, context);
      const int32_t n_vocab = context.tokenizer->vocab().size();
      std::vector<int32_t> ids;
      for (const json& t : body["tokens"]) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab)
          throw ApiError(400, fmt::format("token ids must be integers in [0, {})", n_vocab),
                         "tokens");
        ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
      }
      // "prompt" as vLLM answers, "content" as llama-server does.
      const std::string text = context.tokenizer->decode(ids, false);
      send_json(res, 200, {{"prompt", text}, {"content", text}});
    } catch (const ApiError& e) {
      fail_with(res, e);
    }
  }

  void fail_anthropic(HttpResponse& res, const ApiError& e) {
    metrics.record_rejected(e.status);
    send_json(res, e.status, anthropic_error_body(e));
  }

  // Anthropic's POST /v1/messages (server/api/anthropic.h): the request becomes an OpenAI chat
  // request and is generated as /v1/chat/completions generates it; the answer goes back as a
  // message or as Anthropic's typed events.
  void handle_anthropic_messages(const HttpRequest& req, HttpResponse& res) {
    if (!authorized(req, res)) return;
    auto g = std::make_shared<Generation>();
    try {
      g->request = parse_completion(anthropic_to_openai(parse_body(req)), true, context);
    } catch (const ApiError& e) {
      fail_anthropic(res, e);
      return;
    } catch (const json::exception& e) {
      fail_anthropic(res, wrong_type(e));
      return;
    }
    if (!start(*g)) {
      fail_anthropic(res, queue_full());
      return;
    }
    const std::string id = fmt::format("msg_{}", next_id++);
    if (!g->request.stream) {
      respond_whole(res, g, [g, id] { return anthropic_message(g->request, g->choices[0], id); });
      return;
    }
    auto writer = std::make_shared<AnthropicStreamWriter>(g->request, id);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, g, writer](size_t, ChunkSink& sink) {
          // Anthropic's keep-alive is a ping event.
          TypedEventWriter out(sink, anthropic_sse);
          const auto send = [&out](const json& event) { return out.send(event); };
          const auto send_all = [&out](const std::vector<json>& e) { return out.send_all(e); };
          if (!send(writer->start())) return g->cancel(), false;
          while (!g->all_done()) {
            ChannelBatch batch = poll(*g)[0];
            const bool finished = batch.result.has_value();
            const ReasoningSplitter::Pieces fresh = collect(*g, 0, batch);
            if (finished && !g->error.empty()) {
              send(anthropic_error_body(ApiError(500, g->error)));
              break;
            }
            if (!send_all(writer->delta(fresh.reasoning, fresh.content))) return g->cancel(), false;
            if (finished && !send_all(writer->finish(g->choices[0]))) return g->cancel(), false;
            if (out.keep_alive_due() && !send(AnthropicStreamWriter::ping()))
              return g->cancel(), false;
          }
          sink.done();
          return true;
        },
        [g](bool) { g->cancel(); });
  }

  // OpenAI's Responses API (server/api/responses.h): the chat path, answered as a response
  // object or its typed events, with llama-server's prompt_progress and timings when asked.
  void handle_responses(const HttpRequest& req, HttpResponse& res) {
    if (!authorized(req, res)) return;
    auto g = std::make_shared<Generation>();
    if (!parsed(res, [&] { g->request = parse_responses(parse_body(req), context); })) return;
    if (!start(*g)) {
      fail_with(res, queue_full());
      return;
    }
    const std::string id = fmt::format("resp_{}", next_id++);
    const auto created = static_cast<int64_t>(std::time(nullptr));
    if (!g->request.stream) {
      respond_whole(res, g, [g, id, created] {
        return responses_response(g->request, g->choices[0], id, created);
      });
      return;
    }
    auto writer = std::make_shared<ResponsesStreamWriter>(g->request, id, created);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, g, writer](size_t, ChunkSink& sink) {
          TypedEventWriter out(sink, responses_sse);
          const auto send = [&out](const json& event) { return out.send(event); };
          const auto send_all = [&out](const std::vector<json>& e) { return out.send_all(e); };
          if (!send_all(writer->start())) return g->cancel(), false;
          while (!g->all_done()) {
            ChannelBatch batch = poll(*g)[0];
            for (const engine::PromptProgress& p : batch.progress) {
              json event = writer->in_progress();
              add_progress(event, p, g->request);
              if (!send(event)) return g->cancel(), false;
            }
            const bool finished = batch.result.has_value();
            const ReasoningSplitter::Pieces fresh = collect(*g, 0, batch);
            if (finished && !g->error.empty()) {
              send_all(writer->failed(ApiError(500, g->error)));
              break;
            }
            std::vector<json> events = writer->delta(fresh.reasoning, fresh.content);
            if (g->request.timings_per_token) {
              for (json& event : events) {
                if (event["type"] == "response.output_text.delta")
                  event["timings"] = ResponseWriter::timings(g->choices[0]);
              }
            }
            if (!send_all(events)) return g->cancel(), false;
            if (finished) {
              std::vector<json> last = writer->finish(g->choices[0]);
              if (g->request.timings_per_token)
                last.back()["timings"] = ResponseWriter::timings(g->choices[0]);
              if (!send_all(last)) return g->cancel(), false;
            }
            // A keep-alive: clients' event parsers skip SSE comments.
            if (out.keep_alive_due() && !out.send_comment("keep-alive")) return g->cancel(), false;
          }
          sink.done();
          return true;
        },
        [g](bool) { g->cancel(); });
  }

  // Anthropic's POST /v1/messages/count_tokens: {"input_tokens": N}.
  void handle_anthropic_count_tokens(const HttpRequest& req, HttpResponse& res) {
    if (!authorized(req, res)) return;
    try {
      send_json(res, 200, anthropic_count_tokens(parse_body(req), context));
    } catch (const ApiError& e) {
      fail_anthropic(res, e);
    } catch (const json::exception& e) {
      fail_anthropic(res, wrong_type(e));
    }
  }

  // CORS: a browser asks before a cross-origin call (OPTIONS preflight, answered for every
  // path, no key needed: browsers send none) and reads Access-Control-Allow-Origin on the
  // answer. Both name the caller's origin only when the policy allows it; otherwise the
  // browser keeps the answer from the page.
  void allow_origin(const HttpRequest& req, HttpResponse& res) const {
    const std::string origin = req.get_header_value("Origin");
    if (!cors.allows(origin)) return;
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Access-Control-Allow-Credentials", "true");
    res.set_header("Vary", "Origin");
  }

  void cors_routes(HttpRoutes& server) {
    server.options([this](const HttpRequest& req, HttpResponse& res) {
      allow_origin(req, res);
      if (!res.has_header("Access-Control-Allow-Origin")) return;
      res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
      // The headers asked for (Authorization must be named: a "*" does not cover it).
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? "*" : asked);
      res.set_header("Access-Control-Max-Age", "600");
    });
    server.after([this](const HttpRequest& req, HttpResponse& res) {
      if (req.method != "OPTIONS") allow_origin(req, res);
    });
  }

  // A POST route whose handler may read a JSON field of the wrong type without checking it
  // first: that is the client's error (400), not the server's.
  void post(HttpRoutes& server, const std::string& path, HttpHandler handler) {
    server.post(path,
                [this, handler = std::move(handler)](const HttpRequest& req, HttpResponse& res) {
                  try {
                    handler(req, res);
                  } catch (const json::exception& e) {
                    res = HttpResponse();
                    fail_with(res, wrong_type(e));
                  }
                });
  }

  // Vertex AI's POST /predict (server/api/vertex.h): each instance is answered by the
  // route its format names, called here as if it were a request of its own, answered whole.
  void vertex_routes(HttpRoutes& server, const HttpHandler& health) {
    if (!options.vertex.health_route.empty()) server.get(options.vertex.health_route, health);
    post(server, options.vertex.predict_route, [this](const HttpRequest& req, HttpResponse& res) {
      if (!authorized(req, res)) return;
      std::vector<std::string> paths = http_routes.post_paths();
      std::erase(paths, options.vertex.predict_route);
      try {
        send_json(res, 200,
                  vertex_predict(parse_body(req), paths,
                                 [this, &req](const std::string& path, json request) {
                                   return answer_internally(req, path, request);
                                 }));
      } catch (const ApiError& e) {
        fail_with(res, e);
      }
    });
  }

  // Runs the POST route `path` on `body` with the headers of `outer`; its whole answer's JSON.
  json answer_internally(const HttpRequest& outer, const std::string& path, const json& body) {
    HttpRequest inner;
    inner.method = "POST";
    inner.path = inner.target = path;
    inner.headers = outer.headers;
    inner.remote_addr = outer.remote_addr;
    inner.body = body.dump();
    HttpResponse res;
    http_routes.dispatch(inner, res);
    std::string text = std::move(res.body);
    if (res.provider) {
      bool done = false;
      ChunkSink sink;
      sink.write = [&text](const char* data, size_t size) {
        text.append(data, size);
        return true;
      };
      sink.is_writable = [] { return true; };
      sink.done = [&done] { done = true; };
      while (!done && res.provider(text.size(), sink)) {
      }
      if (res.releaser) res.releaser(done);
    }
    json answer = json::parse(text, nullptr, false);
    return answer.is_discarded() ? json(text) : answer;
  }

  void routes(HttpRoutes& server) {
    cors_routes(server);
    if (options.webui) {
      for (const WebAsset& asset : web_assets()) {
        server.get(std::string(asset.path), [&asset](const HttpRequest&, HttpResponse& res) {
          // Revalidated on each load, so a new binary's page is never mixed with an old one's.
          res.set_header("Cache-Control", "no-cache");
          // The page runs only its own files: no inline script, nothing from elsewhere.
          res.set_header("Content-Security-Policy",
                         "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                         "base-uri 'none'; frame-ancestors 'none'");
          res.set_header("X-Content-Type-Options", "nosniff");
          res.set_content(asset.body.data(), asset.body.size(), std::string(asset.content_type));
        });
      }
    }
    const auto health = [](const HttpRequest&, HttpResponse& res) {
      send_json(res, 200, {{"status", "ok"}});
    };
    server.get("/health", health);
    server.get("/v1/health", health);
    server.get("/metrics", [this](const HttpRequest&, HttpResponse& res) {
      if (!options.metrics) {  // as llama-server answers when its metrics are off
        send_json(res, 501,
                  ApiError(501, "this server has its metrics off (--no-metrics)", "",
                           "not_supported_error")
                      .body());
        return;
      }
      res.set_header("Process-Start-Time-Unix", std::to_string(started_unix));
      res.set_content(metrics.render(), "text/plain; version=0.0.4");
    });
    // llama-server's GET /slots: one entry per sequence the engine runs at once. The engine
    // schedules sequences, not slots, so the running ones are shown in the first entries.
    server.get("/slots", [this](const HttpRequest& req, HttpResponse& res) {
      if (!authorized(req, res)) return;
      if (!options.slots) {
        send_json(res, 501,
                  ApiError(501, "this server's /slots is off (start it with --slots)", "",
                           "not_supported_error")
                      .body());
        return;
      }
      const int64_t running = metrics.running.load();
      json slots = json::array();
      for (int i = 0; i < options.total_slots; ++i) {
        json slot = {{"id", i}, {"n_ctx", context.context}, {"is_processing", i < running}};
        if (i >= running)
          slot["next_token"] =
              json::array({{{"has_next_token", false}, {"n_remain", -1}, {"n_decoded", 0}}});
        slots.push_back(std::move(slot));
      }
      send_json(res, 200, slots);
    });
    // llama-server answers the OpenAI routes with and without /v1; so does inferd.
    const auto models = [this](const HttpRequest& req, HttpResponse& res) {
      if (!authorized(req, res)) return;
      json data = json::array();
      for (const std::string& id : context.model_ids) {
        data.push_back({{"id", id},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "inferd"},
                        {"max_model_len", context.context}});
      }
      // vLLM lists each LoRA module as a model whose parent is the base model.
      if (options.lora != nullptr) {
        for (const LoraAdapterInfo& a : options.lora->adapters()) {
          if (a.name.empty()) continue;
          data.push_back({{"id", a.name},
                          {"object", "model"},
                          {"created", 0},
                          {"owned_by", "inferd"},
                          {"root", a.path},
                          {"parent", context.model_ids.front()},
                          {"max_model_len", context.context}});
        }
      }
      send_json(res, 200, {{"object", "list"}, {"data", data}});
    };
    const auto completions = [this](const HttpRequest& req, HttpResponse& res) {
      handle_completion(req, res, false);
    };
    const auto chat = [this](const HttpRequest& req, HttpResponse& res) {
      handle_completion(req, res, true);
    };
    for (const std::string prefix : {"/v1", ""}) {
      server.get(prefix + "/models", models);
      post(server, prefix + "/chat/completions", chat);
      post(server, prefix + "/chat/completions/input_tokens",
           [this](const HttpRequest& req, HttpResponse& res) { handle_input_tokens(req, res); });
    }
    // llama-server's GET /props: what its web page and clients read about the server.
    server.get("/props", [this](const HttpRequest& req, HttpResponse& res) {
      if (!authorized(req, res)) return;
      const json params = native_sampling_settings(
          context.native_sampling_defaults,
          context.default_max_tokens > 0 ? context.default_max_tokens : -1);
      send_json(res, 200,
                {{"default_generation_settings", {{"n_ctx", context.context}, {"params", params}}},
                 {"total_slots", options.total_slots},
                 {"model_path", options.model_path},
                 {"model_alias", context.model_ids.front()},
                 {"chat_template", options.chat_template},
                 {"modalities", {{"vision", false}, {"audio", false}}},
                 {"build_info", "inferd"}});
    });
    // /completions without /v1 is llama-server's own completion API, as there.
    post(server, "/v1/completions", completions);
    const auto native = [this](const HttpRequest& req, HttpResponse& res) {
      handle_native_completion(req, res);
    };
    post(server, "/completion", native);
    post(server, "/completions", native);
    post(server, "/infill", [this](const HttpRequest& req, HttpResponse& res) {
      handle_native_completion(req, res, true);
    });
    post(server, "/tokenize",
         [this](const HttpRequest& req, HttpResponse& res) { handle_tokenize(req, res); });
    post(server, "/detokenize",
         [this](const HttpRequest& req, HttpResponse& res) { handle_detokenize(req, res); });
    post(server, "/apply-template",
         [this](const HttpRequest& req, HttpResponse& res) { handle_apply_template(req, res); });
    // llama-server's LoRA routes: the adapters and their scales now, and new scales for the
    // requests that give none of their own.
    server.get("/lora-adapters", [this](const HttpRequest& req, HttpResponse& res) {
      if (!authorized(req, res)) return;
      send_json(res, 200, lora_registry().list());
    });
    post(server, "/lora-adapters", [this](const HttpRequest& req, HttpResponse& res) {
      if (!authorized(req, res)) return;
      parsed(res, [&] {
        lora_registry().set_scales(parse_body(req));
        send_json(res, 200, {{"success", true}});
      });
    });
    // llama-server's embedding routes: its own answer without /v1, OpenAI's with it.
    for (const char* path : {"/embedding", "/embeddings"}) {
      post(server, path, [this](const HttpRequest& req, HttpResponse& res) {
        handle_embeddings(req, res, false);
      });
    }
    post(server, "/v1/embeddings",
         [this](const HttpRequest& req, HttpResponse& res) { handle_embeddings(req, res, true); });
    for (const char* path : {"/rerank", "/reranking", "/v1/rerank", "/v1/reranking"}) {
      post(server, path,
           [this](const HttpRequest& req, HttpResponse& res) { handle_rerank(req, res); });
    }
    for (const std::string prefix : {"/v1", ""}) {
      post(server, prefix + "/responses",
           [this](const HttpRequest& req, HttpResponse& res) { handle_responses(req, res); });
      post(server, prefix + "/responses/input_tokens",
           [this](const HttpRequest& req, HttpResponse& res) {
             if (!authorized(req, res)) return;
             parsed(res,
                    [&] { send_json(res, 200, responses_input_tokens(parse_body(req), context)); });
           });
    }
    post(server, "/v1/messages", [this](const HttpRequest& req, HttpResponse& res) {
      handle_anthropic_messages(req, res);
    });
    post(server, "/v1/messages/count_tokens", [this](const HttpRequest& req, HttpResponse& res) {
      handle_anthropic_count_tokens(req, res);
    });
    if (options.vertex.enabled) vertex_routes(server, health);
    add_agent_routes(
        server, options.tools, options.cors_proxy,
        {[this](const HttpRequest& req, HttpResponse& res) { return authorized(req, res); },
         [this](std::string_view origin) { return cors.allows(origin); }});
    // Errors the router and the transport answer themselves (404, 405, 413, 431, a handler's
    // exception) get an OpenAI error object too.
    server.on_error([this](const HttpRequest&, HttpResponse& res, std::string_view message) {
      metrics.record_rejected(res.status);
      send_error(res, res.status, std::string(message));
    });
  }
};

HttpServer::HttpServer(EngineLoop& loop, ServerMetrics& metrics, ParseContext context,
                       ServerOptions options)
    : impl_(std::make_unique<Impl>(loop, metrics, std::move(context), std::move(options))) {
  Impl& impl = *impl_;
  for (const std::string_view host : comma_list(impl.options.host)) impl.hosts.emplace_back(host);
  if (impl.hosts.empty()) fail("--host '{}' names no address", impl.options.host);
  impl.routes(impl.http_routes);
  impl.transport = std::make_unique<HttpTransport>(impl.http_routes, impl.options.http);
}

HttpServer::~HttpServer() = default;

void HttpServer::listen() {
  Impl& impl = *impl_;
  // Every address on the same port: with port 0 the first one's.
  impl.bound_port = impl.transport->bind(impl.hosts, impl.options.port);
  for (const std::string& host : impl.hosts) {
    fmt::print(stderr, "[inferd] serving on http://{}:{}{}\n",
               host.find(':') != std::string::npos ? "[" + host + "]" : host, impl.bound_port,
               impl.options.webui ? " (chat page at /)" : "");
  }
  impl.transport->run();
}

void HttpServer::stop() {
  impl_->transport->stop();
}

int HttpServer::port() const {
  return impl_->bound_port;
}

}  // namespace inferd::server

// inferd._inferd: the C++ API (include/inferd/engine.h) for Python. The vLLM-shaped classes
// (LLM, SamplingParams, RequestOutput, ...) are Python code in python/inferd/; this module only
// opens an engine and runs calls on it.
//
// Every call runs on a worker thread of its own (a Call), while the Python thread waits with the
// GIL released: other Python threads keep running, and the waiting thread wakes every few tens
// of milliseconds to take the GIL briefly and run Python's signal handlers, so Ctrl-C during a
// long generate() (a prefill included, where no text comes out for a while) cancels the call's
// requests through their CancelToken and raises KeyboardInterrupt once they have stopped. The
// worker never touches Python: stream deltas go through a queue that the Python thread drains,
// so streaming works as an iterator and no Python code runs on the engine's thread.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "inferd/engine.h"

namespace py = pybind11;

namespace {

// A StreamDelta that owns its text (the engine's string_view lives only during the callback).
struct Delta {
  size_t prompt_index = 0;
  int32_t choice = 0;
  std::string text;
  bool finished = false;
  inferd::FinishReason finish_reason = inferd::FinishReason::kStop;
};

using Job = std::function<std::vector<inferd::RequestOutput>(const inferd::StreamCallback&,
                                                             const inferd::CancelToken&)>;

// One generate()/chat() running on its own thread. The state is shared with the worker so that
// nothing it touches goes away before it ends (the destructor cancels and joins anyway).
class Call {
 public:
  Call(std::shared_ptr<inferd::Engine> engine, Job job, bool stream)
      : engine_(std::move(engine)), state_(std::make_shared<State>()) {
    std::shared_ptr<State> state = state_;
    inferd::CancelToken cancel = cancel_;
    worker_ = std::thread([state, cancel, stream, job = std::move(job)] {
      inferd::StreamCallback on_delta;
      if (stream) {
        on_delta = [state](const inferd::StreamDelta& d) {
          {
            std::lock_guard lock(state->mutex);
            state->deltas.push_back(
                Delta{d.prompt_index, d.choice, std::string(d.text), d.finished, d.finish_reason});
          }
          state->ready.notify_one();
        };
      }
      std::vector<inferd::RequestOutput> outputs;
      std::exception_ptr error;
      try {
        outputs = job(on_delta, cancel);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard lock(state->mutex);
        state->outputs = std::move(outputs);
        state->error = error;
        state->done = true;
      }
      state->ready.notify_one();
    });
  }

  ~Call() {
    cancel_.cancel();
    if (worker_.joinable()) {
      // The worker never takes the GIL, so joining with it held cannot deadlock; releasing it
      // (when this thread has it) lets other Python threads run while the engine stops.
      if (PyGILState_Check()) {
        py::gil_scoped_release release;
        worker_.join();
      } else {
        worker_.join();
      }
    }
  }
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  void cancel() { cancel_.cancel(); }

  // The next stream delta, or None once the call has finished and every delta was taken.
  std::optional<Delta> next_delta() {
    for (;;) {
      std::optional<Delta> delta;
      bool done = false;
      {
        py::gil_scoped_release release;
        std::unique_lock lock(state_->mutex);
        state_->ready.wait_for(lock, kSignalPoll,
                               [&] { return !state_->deltas.empty() || state_->done; });
        if (!state_->deltas.empty()) {
          delta = std::move(state_->deltas.front());
          state_->deltas.pop_front();
        } else {
          done = state_->done;
        }
      }
      // Also when a delta came: while deltas keep coming the wait never times out, and a
      // Ctrl-C left for Python's own check would surface in the caller's loop, where nothing
      // cancels the call.
      check_signals();
      if (delta) return delta;
      if (done) break;
    }
    join();
    if (state_->error) std::rethrow_exception(state_->error);
    return std::nullopt;
  }

  // Waits for the whole call and returns its outputs (rethrows the engine's error).
  std::vector<inferd::RequestOutput> result() {
    for (;;) {
      {
        py::gil_scoped_release release;
        std::unique_lock lock(state_->mutex);
        if (state_->ready.wait_for(lock, kSignalPoll, [&] { return state_->done; })) break;
      }
      check_signals();
    }
    join();
    if (state_->error) std::rethrow_exception(state_->error);
    return std::move(state_->outputs);
  }

 private:
  // How often a waiting Python thread looks at its signals: Ctrl-C answers within this.
  static constexpr std::chrono::milliseconds kSignalPoll{50};

  struct State {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<Delta> deltas;
    bool done = false;
    std::vector<inferd::RequestOutput> outputs;
    std::exception_ptr error;
  };

  // Runs Python's signal handlers (the GIL is held here). If one raised (KeyboardInterrupt from
  // Ctrl-C), the call's requests are cancelled and have stopped before the exception goes on.
  void check_signals() {
    if (PyErr_CheckSignals() == 0) return;
    py::error_already_set interrupted;  // takes the pending exception
    cancel_.cancel();
    join();
    throw interrupted;
  }

  void join() {
    if (!worker_.joinable()) return;
    py::gil_scoped_release release;
    worker_.join();
  }

  std::shared_ptr<inferd::Engine> engine_;  // kept open while the call runs
  std::shared_ptr<State> state_;
  inferd::CancelToken cancel_;
  std::thread worker_;
};

std::vector<inferd::ChatMessage> to_messages(const std::vector<std::pair<std::string, std::string>>& m) {
  std::vector<inferd::ChatMessage> out;
  out.reserve(m.size());
  for (const auto& [role, content] : m) out.push_back({role, content});
  return out;
}

using Conversation = std::vector<std::pair<std::string, std::string>>;

// Engine text as a Python str. The API promises whole UTF-8 characters; should a cut-off
// character ever come through (a token that is half of one), it becomes U+FFFD rather than an
// exception that would lose the whole output.
py::str utf8(std::string_view text) {
  return py::reinterpret_steal<py::str>(
      PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()), "replace"));
}

}  // namespace

PYBIND11_MODULE(_inferd, m) {
  m.doc() = "inferd's C++ API (include/inferd/engine.h); use the inferd package, not this module";
  m.def("version", &inferd::version);

  // inferd::Error (bad model file, bad parameter, prompt too long): ValueError's subclass, so
  // `except ValueError` catches a bad argument as Python code expects.
  static py::exception<inferd::Error> error(m, "InferdError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const inferd::Error& e) {
      py::set_error(error, e.what());
    }
  });

  py::enum_<inferd::FinishReason>(m, "FinishReason")
      .value("stop", inferd::FinishReason::kStop)
      .value("length", inferd::FinishReason::kLength)
      .value("cancelled", inferd::FinishReason::kCancelled)
      .value("error", inferd::FinishReason::kError);

  py::class_<inferd::SamplingParams>(m, "SamplingParams")
      .def(py::init<>())
      .def_readwrite("n", &inferd::SamplingParams::n)
      .def_readwrite("temperature", &inferd::SamplingParams::temperature)
      .def_readwrite("top_k", &inferd::SamplingParams::top_k)
      .def_readwrite("top_p", &inferd::SamplingParams::top_p)
      .def_readwrite("min_p", &inferd::SamplingParams::min_p)
      .def_readwrite("repetition_penalty", &inferd::SamplingParams::repetition_penalty)
      .def_readwrite("repeat_last_n", &inferd::SamplingParams::repeat_last_n)
      .def_readwrite("presence_penalty", &inferd::SamplingParams::presence_penalty)
      .def_readwrite("frequency_penalty", &inferd::SamplingParams::frequency_penalty)
      .def_readwrite("logit_bias", &inferd::SamplingParams::logit_bias)
      .def_readwrite("seed", &inferd::SamplingParams::seed)
      .def_readwrite("max_tokens", &inferd::SamplingParams::max_tokens)
      .def_readwrite("stop", &inferd::SamplingParams::stop)
      .def_readwrite("ignore_eos", &inferd::SamplingParams::ignore_eos)
      .def_readwrite("stop_token_ids", &inferd::SamplingParams::stop_token_ids)
      .def_readwrite("min_tokens", &inferd::SamplingParams::min_tokens)
      .def_readwrite("include_stop_str_in_output",
                     &inferd::SamplingParams::include_stop_str_in_output)
      .def_readwrite("allowed_token_ids", &inferd::SamplingParams::allowed_token_ids)
      .def_readwrite("bad_words", &inferd::SamplingParams::bad_words)
      .def_readwrite("logprobs", &inferd::SamplingParams::logprobs)
      .def_readwrite("prompt_logprobs", &inferd::SamplingParams::prompt_logprobs)
      .def_readwrite("json_schema", &inferd::SamplingParams::json_schema)
      .def_readwrite("grammar", &inferd::SamplingParams::grammar)
      .def_readwrite("regex", &inferd::SamplingParams::regex)
      .def_readwrite("beam_width", &inferd::SamplingParams::beam_width)
      .def_readwrite("length_penalty", &inferd::SamplingParams::length_penalty)
      .def_readwrite("lora_scales", &inferd::SamplingParams::lora_scales);

  py::class_<inferd::EngineOptions>(m, "EngineOptions")
      .def(py::init<>())
      .def_readwrite("threads", &inferd::EngineOptions::threads)
      .def_readwrite("pin_threads", &inferd::EngineOptions::pin_threads)
      .def_readwrite("context", &inferd::EngineOptions::context)
      .def_readwrite("max_seqs", &inferd::EngineOptions::max_seqs)
      .def_readwrite("max_batched_tokens", &inferd::EngineOptions::max_batched_tokens)
      .def_readwrite("prefix_caching", &inferd::EngineOptions::prefix_caching)
      .def_readwrite("chat_template", &inferd::EngineOptions::chat_template)
      .def_property(
          "device",
          [](const inferd::EngineOptions& o) {
            return std::string(o.device == inferd::Device::kCuda ? "cuda" : "cpu");
          },
          [](inferd::EngineOptions& o, const std::string& d) {
            if (d == "cpu") {
              o.device = inferd::Device::kCpu;
            } else if (d == "cuda") {
              o.device = inferd::Device::kCuda;
            } else {
              throw inferd::Error("device must be 'cpu' or 'cuda', got '" + d + "'");
            }
          });

  py::class_<inferd::TokenLogprob>(m, "TokenLogprob")
      .def_readonly("token", &inferd::TokenLogprob::token)
      .def_readonly("logprob", &inferd::TokenLogprob::logprob);
  py::class_<inferd::TokenLogprobs>(m, "TokenLogprobs")
      .def_readonly("token", &inferd::TokenLogprobs::token)
      .def_readonly("logprob", &inferd::TokenLogprobs::logprob)
      .def_readonly("top", &inferd::TokenLogprobs::top);

  py::class_<inferd::PromptTokenLogprobs>(m, "PromptTokenLogprobs")
      .def_readonly("token", &inferd::PromptTokenLogprobs::token)
      .def_readonly("logprob", &inferd::PromptTokenLogprobs::logprob)
      .def_readonly("rank", &inferd::PromptTokenLogprobs::rank)
      .def_readonly("top", &inferd::PromptTokenLogprobs::top);

  py::class_<inferd::CompletionOutput>(m, "CompletionOutput")
      .def_readonly("index", &inferd::CompletionOutput::index)
      .def_property_readonly("text", [](const inferd::CompletionOutput& o) { return utf8(o.text); })
      .def_readonly("token_ids", &inferd::CompletionOutput::token_ids)
      .def_readonly("finish_reason", &inferd::CompletionOutput::finish_reason)
      .def_readonly("stop_reason", &inferd::CompletionOutput::stop_reason)
      .def_readonly("stop_token_id", &inferd::CompletionOutput::stop_token_id)
      .def_readonly("error", &inferd::CompletionOutput::error)
      .def_readonly("logprobs", &inferd::CompletionOutput::logprobs)
      .def_readonly("cumulative_logprob", &inferd::CompletionOutput::cumulative_logprob)
      .def_readonly("score", &inferd::CompletionOutput::score);

  py::class_<inferd::RequestMetrics>(m, "RequestMetrics")
      .def_readonly("prompt_tokens", &inferd::RequestMetrics::prompt_tokens)
      .def_readonly("completion_tokens", &inferd::RequestMetrics::completion_tokens)
      .def_readonly("cached_tokens", &inferd::RequestMetrics::cached_tokens)
      .def_readonly("queue_s", &inferd::RequestMetrics::queue_s)
      .def_readonly("ttft_s", &inferd::RequestMetrics::ttft_s)
      .def_readonly("prefill_s", &inferd::RequestMetrics::prefill_s)
      .def_readonly("decode_s", &inferd::RequestMetrics::decode_s)
      .def_readonly("e2e_s", &inferd::RequestMetrics::e2e_s);

  py::class_<inferd::RequestOutput>(m, "RequestOutput")
      .def_readonly("index", &inferd::RequestOutput::index)
      .def_property_readonly("prompt",
                             [](const inferd::RequestOutput& o) { return utf8(o.prompt); })
      .def_readonly("prompt_token_ids", &inferd::RequestOutput::prompt_token_ids)
      .def_readonly("outputs", &inferd::RequestOutput::outputs)
      .def_readonly("metrics", &inferd::RequestOutput::metrics)
      .def_readonly("prompt_logprobs", &inferd::RequestOutput::prompt_logprobs);

  py::class_<Delta>(m, "StreamDelta")
      .def_readonly("prompt_index", &Delta::prompt_index)
      .def_readonly("choice", &Delta::choice)
      .def_property_readonly("text", [](const Delta& d) { return utf8(d.text); })
      .def_readonly("finished", &Delta::finished)
      .def_readonly("finish_reason", &Delta::finish_reason);

  py::class_<inferd::ModelInfo>(m, "ModelInfo")
      .def_readonly("architecture", &inferd::ModelInfo::architecture)
      .def_readonly("name", &inferd::ModelInfo::name)
      .def_readonly("n_vocab", &inferd::ModelInfo::n_vocab)
      .def_readonly("context_length", &inferd::ModelInfo::context_length)
      .def_readonly("context", &inferd::ModelInfo::context)
      .def_readonly("has_chat_template", &inferd::ModelInfo::has_chat_template);

  py::class_<inferd::EngineStats>(m, "EngineStats")
      .def_readonly("threads", &inferd::EngineStats::threads)
      .def_readonly("peak_kv_bytes", &inferd::EngineStats::peak_kv_bytes)
      .def_readonly("computed_tokens", &inferd::EngineStats::computed_tokens)
      .def_readonly("generated_tokens", &inferd::EngineStats::generated_tokens)
      .def_readonly("preemptions", &inferd::EngineStats::preemptions);

  py::class_<Call>(m, "Call")
      .def("next_delta", &Call::next_delta)
      .def("result", &Call::result)
      .def("cancel", &Call::cancel);

  // The engine is held by shared_ptr so that a Call keeps it open even if the Python Engine
  // object is dropped while the call runs.
  py::class_<inferd::Engine, std::shared_ptr<inferd::Engine>>(m, "Engine")
      .def(py::init([](const std::string& path, const inferd::EngineOptions& options) {
             py::gil_scoped_release release;  // loading reads and maps the whole file
             return std::make_shared<inferd::Engine>(path, options);
           }),
           py::arg("model_path"), py::arg("options") = inferd::EngineOptions{})
      .def(
          "start_generate",
          [](const std::shared_ptr<inferd::Engine>& engine, std::vector<std::string> prompts,
             inferd::SamplingParams params, bool stream) {
            Job job = [engine, prompts = std::move(prompts), params](
                          const inferd::StreamCallback& cb, const inferd::CancelToken& cancel) {
              return engine->generate(prompts, params, cb, cancel);
            };
            return std::make_unique<Call>(engine, std::move(job), stream);
          },
          py::arg("prompts"), py::arg("params"), py::arg("stream") = false)
      .def(
          "start_generate_tokens",
          [](const std::shared_ptr<inferd::Engine>& engine,
             std::vector<std::vector<int32_t>> prompts, inferd::SamplingParams params,
             bool stream) {
            Job job = [engine, prompts = std::move(prompts), params](
                          const inferd::StreamCallback& cb, const inferd::CancelToken& cancel) {
              return engine->generate_tokens(prompts, params, cb, cancel);
            };
            return std::make_unique<Call>(engine, std::move(job), stream);
          },
          py::arg("prompts"), py::arg("params"), py::arg("stream") = false)
      .def(
          "start_chat",
          [](const std::shared_ptr<inferd::Engine>& engine,
             const std::vector<Conversation>& conversations, inferd::SamplingParams params,
             bool stream) {
            std::vector<std::vector<inferd::ChatMessage>> convs;
            convs.reserve(conversations.size());
            for (const Conversation& c : conversations) convs.push_back(to_messages(c));
            Job job = [engine, convs = std::move(convs), params](
                          const inferd::StreamCallback& cb, const inferd::CancelToken& cancel) {
              return engine->chat_batch(convs, params, cb, cancel);
            };
            return std::make_unique<Call>(engine, std::move(job), stream);
          },
          py::arg("conversations"), py::arg("params"), py::arg("stream") = false)
      .def(
          "apply_chat_template",
          [](const inferd::Engine& engine, const Conversation& messages,
             bool add_generation_prompt) {
            std::vector<inferd::ChatMessage> msgs = to_messages(messages);
            py::gil_scoped_release release;  // waits for a running call (the engine's lock)
            return engine.apply_chat_template(msgs, add_generation_prompt);
          },
          py::arg("messages"), py::arg("add_generation_prompt") = true)
      .def(
          "tokenize",
          [](const inferd::Engine& engine, const std::string& text, bool add_special) {
            return engine.tokenize(text, add_special);
          },
          py::arg("text"), py::arg("add_special") = true)
      .def(
          "detokenize",
          [](const inferd::Engine& engine, const std::vector<int32_t>& ids,
             bool skip_special_tokens) {
            // One token can be part of a UTF-8 character (utf8() replaces it).
            return utf8(engine.detokenize(ids, skip_special_tokens));
          },
          py::arg("ids"), py::arg("skip_special_tokens") = false)
      .def("add_lora_adapter", &inferd::Engine::add_lora_adapter, py::arg("path"),
           py::call_guard<py::gil_scoped_release>())  // (waits for a running call)
      .def("model_info", &inferd::Engine::model_info)
      .def("stats", &inferd::Engine::stats, py::call_guard<py::gil_scoped_release>());
}

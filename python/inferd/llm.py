"""inferd.LLM: vLLM's offline-inference class over inferd's engine (the C++ API through the
extension module inferd._inferd)."""

from __future__ import annotations

import os
import random
import sys
from typing import Any, Iterable, Iterator, Optional, Sequence, Union

from . import _inferd
from .lora.request import LoRARequest
from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput, StreamDelta
from .sampling_params import SamplingParams

# vLLM's finish reasons: a cancelled request is "abort".
_FINISH = {"stop": "stop", "length": "length", "cancelled": "abort", "error": "error"}

# Keyword arguments of vLLM's LLM (and EngineArgs) that concern GPUs, Hugging Face downloads or
# vLLM's own machinery: accepted so that scripts written for vLLM run, and without effect.
_IGNORED_KWARGS = {
    "dtype", "gpu_memory_utilization", "enforce_eager", "trust_remote_code", "swap_space",
    "cpu_offload_gb", "download_dir", "tokenizer_mode", "disable_log_stats", "hf_token",
    "revision", "tokenizer_revision", "code_revision", "max_seq_len_to_capture",
    "compilation_config", "load_format", "disable_custom_all_reduce", "hf_overrides",
    "skip_tokenizer_init", "kv_cache_dtype", "block_size", "quantization", "generation_config",
    "override_generation_config", "distributed_executor_backend", "pipeline_parallel_size",
    "data_parallel_size", "max_logprobs", "enable_chunked_prefill", "async_scheduling",
    "disable_log_requests", "enable_log_requests", "model_impl", "served_model_name",
    "allowed_local_media_path", "logprobs_mode", "runner", "convert", "task",
    # LoRA: an adapter is loaded when a request first names it, at any rank up to 1024, and
    # LoRA is always on.
    "enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype",
    "fully_sharded_loras", "lora_extra_vocab_size",
}


# What the engine reports for bad input (a model file, an option, a request): a ValueError.
InferdError = _inferd.InferdError


def _model_path(model: str) -> str:
    """The GGUF file to open. vLLM scripts name Hugging Face models ("facebook/opt-125m"),
    which inferd cannot download; with INFERD_SUBSTITUTE_MODEL set to a GGUF file, a model
    name that is not a file opens that file instead (what running vLLM's examples unchanged
    needs), with a note on stderr."""
    if os.path.exists(model):
        return model
    substitute = os.environ.get("INFERD_SUBSTITUTE_MODEL")
    if substitute:
        print(f"inferd: '{model}' is not a file; opening INFERD_SUBSTITUTE_MODEL={substitute}",
              file=sys.stderr)
        return substitute
    return model  # the engine's error names the missing file


def _text_of(content: Any) -> str:
    """A chat message's content: a string, or OpenAI's list of parts (text parts only)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "text":
            texts.append(part.get("text", ""))
        else:
            raise NotImplementedError(f"chat: content parts of type {part.get('type')!r} "
                                      "are not supported (text only)")
    return "".join(texts)


def _conversation(messages: Sequence[dict]) -> list[tuple[str, str]]:
    return [(m["role"], _text_of(m.get("content"))) for m in messages]


class Tokenizer:
    """The model's tokenizer, with the few members of a Hugging Face tokenizer that scripts
    use: encode, decode, apply_chat_template."""

    def __init__(self, engine: "_inferd.Engine"):
        self._engine = engine

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return self._engine.tokenize(text, add_special_tokens)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._engine.detokenize(list(token_ids), skip_special_tokens)

    def __call__(self, text: str, add_special_tokens: bool = True) -> dict:
        return {"input_ids": self.encode(text, add_special_tokens)}

    def apply_chat_template(self, conversation: Sequence[dict], tokenize: bool = True,
                            add_generation_prompt: bool = False, **_: Any):
        text = self._engine.apply_chat_template(_conversation(conversation), add_generation_prompt)
        # The rendered text carries the BOS text itself where the template writes one.
        return self.encode(text, add_special_tokens=False) if tokenize else text

    @property
    def vocab_size(self) -> int:
        return self._engine.model_info().n_vocab


class GenerationStream:
    """Iterator of StreamDelta for one call (LLM.generate_stream / LLM.chat_stream): each item
    is a piece of one choice's text as the engine makes it. Once it is exhausted, `outputs`
    holds the call's RequestOutputs. close() (or leaving a `with` block, or dropping it)
    cancels whatever is still running; Ctrl-C while iterating cancels and raises
    KeyboardInterrupt."""

    def __init__(self, llm: "LLM", call: "_inferd.Call", prompts: list, logprobs: bool):
        self._llm = llm
        self._call = call
        self._prompts = prompts
        self._logprobs = logprobs
        self.outputs: Optional[list[RequestOutput]] = None

    def __iter__(self) -> "GenerationStream":
        return self

    def __next__(self) -> StreamDelta:
        if self._call is None:
            raise StopIteration
        try:
            delta = self._call.next_delta()
            if delta is None:
                self.outputs = self._llm._convert(self._call.result(), self._prompts, self._logprobs)
                self._call = None
                raise StopIteration
            reason = _FINISH[delta.finish_reason.name] if delta.finished else None
            return StreamDelta(delta.prompt_index, delta.choice, delta.text, delta.finished, reason)
        except (StopIteration, GeneratorExit):
            raise
        except BaseException:
            # KeyboardInterrupt (or an error) here: the traceback keeps this stream alive, so
            # dropping it would not stop the call, and the engine, serving one call at a time,
            # would make the LLM's next call wait for this one to run to its end.
            self._cancel_quietly()
            raise

    def _cancel_quietly(self) -> None:
        call, self._call = self._call, None
        if call is not None:
            call.cancel()
            try:
                call.result()
            except BaseException:
                pass

    def close(self) -> None:
        if self._call is not None:
            self._call.cancel()
            self.outputs = self._llm._convert(self._call.result(), self._prompts, self._logprobs)
            self._call = None

    def __enter__(self) -> "GenerationStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LLM:
    """A GGUF model opened for offline inference, as vLLM's LLM.

    model: the GGUF file. max_model_len: tokens per sequence (default: the model's, at most
    4096). max_num_seqs: sequences decoded together (default 16; the KV cache is allocated for
    max_num_seqs x max_model_len tokens).
    seed: makes requests without a seed of their own reproducible from run to run.
    threads, device ("cpu"/"cuda"), chat_template (a built-in name or a file), max_num_batched_tokens
    and enable_prefix_caching pass to the engine. Other vLLM arguments about GPUs or
    downloads are accepted and have no effect; unknown ones raise TypeError."""

    def __init__(self, model: str, *, tokenizer: Optional[str] = None, seed: Optional[int] = None,
                 max_model_len: Optional[int] = None, max_num_seqs: Optional[int] = None,
                 max_num_batched_tokens: Optional[int] = None,
                 enable_prefix_caching: Optional[bool] = None, tensor_parallel_size: Optional[int] = None,
                 threads: Optional[int] = None, device: Optional[str] = None,
                 chat_template: Optional[str] = None, **kwargs: Any):
        unknown = sorted(k for k in kwargs if k not in _IGNORED_KWARGS)
        if unknown:
            raise TypeError(f"LLM() got arguments inferd does not know: {', '.join(unknown)}")
        if kwargs.get("runner") not in (None, "auto", "generate") or \
                kwargs.get("task") not in (None, "auto", "generate"):
            raise NotImplementedError("inferd runs generative models only (no pooling/embedding runner)")
        for name, size in (("tensor_parallel_size", tensor_parallel_size),
                           ("pipeline_parallel_size", kwargs.get("pipeline_parallel_size")),
                           ("data_parallel_size", kwargs.get("data_parallel_size"))):
            if size not in (None, 1):
                raise NotImplementedError(f"{name} > 1 needs mpirun and the `inferd` command "
                                          "(docs/MULTI-MACHINE.md), not the Python package")
        options = _inferd.EngineOptions()
        if max_model_len is not None:
            options.context = int(max_model_len)
        # The KV cache is allocated up front for max_num_seqs sequences of max_model_len tokens
        # (64 x 4096 on SmolLM2: 6 GB), so the default is the engine's and `inferd run`'s 16,
        # not vLLM's 256, which sizes a GPU's memory. More prompts than that still batch: the
        # scheduler admits them as sequences finish.
        if max_num_seqs is not None:
            options.max_seqs = int(max_num_seqs)
        if max_num_batched_tokens is not None:
            options.max_batched_tokens = int(max_num_batched_tokens)
        if enable_prefix_caching is not None:
            options.prefix_caching = bool(enable_prefix_caching)
        if threads is not None:
            options.threads = int(threads)
        if device is not None and device != "auto":
            options.device = device
        if chat_template is not None:
            options.chat_template = chat_template
        self.model = model
        self._engine = _inferd.Engine(_model_path(model), options)
        self._seeds = random.Random(seed) if seed is not None else None
        self._next_request_id = 0
        # LoRARequest.lora_int_id -> (the engine's index of its adapter, its path)
        self._loras: dict[int, tuple[int, str]] = {}

    # --- vLLM's API -------------------------------------------------------------------------

    def get_tokenizer(self) -> Tokenizer:
        return Tokenizer(self._engine)

    def get_default_sampling_params(self) -> SamplingParams:
        return SamplingParams()

    def generate(self, prompts: Any = None, sampling_params: Union[None, SamplingParams,
                 Sequence[SamplingParams]] = None, use_tqdm: Any = True, lora_request: Any = None,
                 priority: Any = None, **_: Any) -> list[RequestOutput]:
        """Generates for a prompt or a list of them: strings, {"prompt": text} or
        {"prompt_token_ids": [...]}. All prompts with the same SamplingParams run through the
        engine's scheduler together (continuous batching); a list of SamplingParams, one per
        prompt, runs one batch per distinct value. lora_request: a LoRARequest (a GGUF adapter)
        for every prompt, or a list of them (None: the model alone), one per prompt; requests
        with different adapters run in the same engine steps. Outputs come in the prompts'
        order."""
        items = self._prompt_list(prompts)
        if sampling_params is None or isinstance(sampling_params, SamplingParams):
            per_prompt = [sampling_params or SamplingParams()] * len(items)
        else:
            per_prompt = list(sampling_params)
            if len(per_prompt) != len(items):
                raise ValueError(f"{len(per_prompt)} SamplingParams for {len(items)} prompts")
        if isinstance(lora_request, (list, tuple)):
            loras = list(lora_request)
            if len(loras) != len(items):
                raise ValueError(f"{len(loras)} LoRA requests for {len(items)} prompts")
        else:
            loras = [lora_request] * len(items)
        # One engine call per distinct (SamplingParams, adapter); calls run one after another.
        groups: dict[int, list[int]] = {}
        for i, (sp, lora) in enumerate(zip(per_prompt, loras)):
            key = next((k for k in groups if per_prompt[k] == sp and loras[k] == lora), i)
            groups.setdefault(key, []).append(i)
        results: list[Optional[RequestOutput]] = [None] * len(items)
        for key, indices in groups.items():
            outs = self._run_prompts([items[i] for i in indices], per_prompt[key], loras[key])
            for i, out in zip(indices, outs):
                results[i] = out
        return results  # type: ignore[return-value]

    def chat(self, messages: Any, sampling_params: Union[None, SamplingParams,
             Sequence[SamplingParams]] = None, use_tqdm: Any = True, lora_request: Any = None,
             chat_template: Optional[str] = None, chat_template_content_format: str = "auto",
             add_generation_prompt: bool = True, continue_final_message: bool = False,
             tools: Any = None, chat_template_kwargs: Optional[dict] = None,
             **_: Any) -> list[RequestOutput]:
        """Answers one conversation (a list of {"role", "content"} messages) or a list of them,
        through the model's chat template (or LLM(chat_template=...)), batched."""
        if chat_template is not None:
            raise NotImplementedError("chat(chat_template=...): give LLM(chat_template=...) "
                                      "(a built-in name or a file) instead")
        if tools:
            raise NotImplementedError("chat(tools=...) is not supported by the Python package")
        if continue_final_message:
            raise NotImplementedError("chat(continue_final_message=True) is not supported")
        conversations = self._conversation_list(messages)
        params = sampling_params or SamplingParams()
        if add_generation_prompt and isinstance(params, SamplingParams) and \
                params.max_tokens is not None and not isinstance(lora_request, (list, tuple)):
            native = self._native(params, lora_request)
            call = self._engine.start_chat(conversations, native, False)
            return self._convert(call.result(), [None] * len(conversations),
                                 params.logprobs is not None, lora_request)
        # Without a generation prompt, with per-conversation parameters or adapters or max_tokens
        # None: the rendered text goes through generate() (encoded as chat() encodes it).
        texts = [self._engine.apply_chat_template(c, add_generation_prompt) for c in conversations]
        return self.generate(texts, sampling_params, lora_request=lora_request)

    # --- inferd's own ------------------------------------------------------------------------

    def generate_stream(self, prompts: Any, sampling_params: Optional[SamplingParams] = None
                        ) -> GenerationStream:
        """Like generate(), but returns an iterator of StreamDelta as text is made (inferd's
        own: vLLM's offline LLM has no streaming). One SamplingParams for all prompts."""
        params = sampling_params or SamplingParams()
        items = self._prompt_list(prompts)
        call, texts = self._start(items, params, stream=True)
        return GenerationStream(self, call, texts, params.logprobs is not None)

    def chat_stream(self, messages: Any, sampling_params: Optional[SamplingParams] = None
                    ) -> GenerationStream:
        """chat() as a GenerationStream (inferd's own)."""
        params = sampling_params or SamplingParams()
        conversations = self._conversation_list(messages)
        if params.max_tokens is None:
            return self.generate_stream([self._engine.apply_chat_template(c, True) for c in conversations], params)
        call = self._engine.start_chat(conversations, params._to_native(self._default_seed()), True)
        return GenerationStream(self, call, [None] * len(conversations), params.logprobs is not None)

    def stats(self) -> "_inferd.EngineStats":
        """The engine's counters since it was opened (tokens computed and generated, ...)."""
        return self._engine.stats()

    # --- internals ---------------------------------------------------------------------------

    def _default_seed(self) -> Optional[int]:
        return self._seeds.getrandbits(63) if self._seeds is not None else None

    @staticmethod
    def _prompt_list(prompts: Any) -> list:
        if prompts is None:
            raise ValueError("generate() needs prompts")
        if isinstance(prompts, (str, dict)):
            return [prompts]
        items = list(prompts)
        if items and isinstance(items[0], int):  # one prompt as token ids
            return [{"prompt_token_ids": items}]
        return items

    @staticmethod
    def _conversation_list(messages: Any) -> list[list[tuple[str, str]]]:
        messages = list(messages)
        if messages and isinstance(messages[0], dict):  # one conversation
            return [_conversation(messages)]
        return [_conversation(c) for c in messages]

    def _native(self, params: SamplingParams, lora: Optional[LoRARequest] = None):
        """The C++ API's SamplingParams of a call, with its adapter's scales."""
        native = params._to_native(self._default_seed())
        if lora is not None:
            native.lora_scales = self._lora_scales(lora)
        return native

    def _lora_scales(self, lora: LoRARequest) -> list[float]:
        """1 for the adapter `lora` names, 0 for the others; the engine loads it the first time
        its lora_int_id comes (as vLLM does)."""
        if not isinstance(lora, LoRARequest):
            raise TypeError(f"lora_request must be a LoRARequest, got {type(lora).__name__}")
        known = self._loras.get(lora.lora_int_id)
        if known is None:
            known = (self._engine.add_lora_adapter(lora.lora_path), lora.lora_path)
            self._loras[lora.lora_int_id] = known
        elif known[1] != lora.lora_path:
            raise ValueError(f"LoRA id {lora.lora_int_id} is {known[1]!r}, not {lora.lora_path!r}")
        scales = [0.0] * (max(index for index, _ in self._loras.values()) + 1)
        scales[known[0]] = 1.0
        return scales

    def _start(self, items: list, params: SamplingParams, stream: bool,
               lora: Optional[LoRARequest] = None):
        """Starts one engine call for the prompts; returns it and the prompts' texts."""
        native = self._native(params, lora)
        texts: list[Optional[str]] = []
        if params.max_tokens is not None and all(isinstance(p, str) for p in items):
            return self._engine.start_generate(list(items), native, stream), list(items)
        ids: list[list[int]] = []
        for p in items:
            if isinstance(p, str):
                texts.append(p)
                ids.append(self._engine.tokenize(p, True))
            elif "prompt_token_ids" in p:
                texts.append(p.get("prompt"))
                ids.append(list(p["prompt_token_ids"]))
            elif "prompt" in p:
                texts.append(p["prompt"])
                ids.append(self._engine.tokenize(p["prompt"], True))
            else:
                raise ValueError(f"a prompt must be a string, {{'prompt': ...}} or "
                                 f"{{'prompt_token_ids': [...]}}, got keys {sorted(p)}")
        if params.max_tokens is None:
            # vLLM's "until the context is full": one limit serves the call, so the longest
            # prompt sets it.
            longest = max((len(i) for i in ids), default=0)
            native.max_tokens = max(1, self._engine.model_info().context - longest)
        return self._engine.start_generate_tokens(ids, native, stream), texts

    def _run_prompts(self, items: list, params: SamplingParams,
                     lora: Optional[LoRARequest] = None) -> list[RequestOutput]:
        call, texts = self._start(items, params, stream=False, lora=lora)
        return self._convert(call.result(), texts, params.logprobs is not None, lora)

    def _convert(self, native: list, texts: list, want_logprobs: bool,
                 lora: Optional[LoRARequest] = None) -> list[RequestOutput]:
        decoded: dict[int, str] = {}

        def piece(token: int) -> str:
            if token not in decoded:
                decoded[token] = self._engine.detokenize([token], False)
            return decoded[token]

        results = []
        for out, text in zip(native, texts):
            choices = []
            for c in out.outputs:
                if c.finish_reason.name == "error":
                    raise InferdError(c.error or "generation failed")
                logprobs = None
                if want_logprobs:
                    logprobs = []
                    for entry in c.logprobs:
                        d: dict[int, Logprob] = {}
                        for rank, alt in enumerate(entry.top, start=1):
                            d[alt.token] = Logprob(alt.logprob, rank, piece(alt.token))
                        if entry.token not in d:
                            d[entry.token] = Logprob(entry.logprob, None, piece(entry.token))
                        logprobs.append(d)
                choices.append(CompletionOutput(
                    index=c.index, text=c.text, token_ids=list(c.token_ids),
                    cumulative_logprob=c.cumulative_logprob if want_logprobs or c.score else None,
                    logprobs=logprobs, finish_reason=_FINISH[c.finish_reason.name],
                    stop_reason=c.stop_reason or (c.stop_token_id if c.stop_token_id >= 0 else None),
                    lora_request=lora))
            # vLLM's prompt_logprobs: None for the first token, then {id: Logprob} of the token
            # itself (its rank) and its alternatives.
            prompt_logprobs = None
            if out.prompt_logprobs:
                prompt_logprobs = [None]
                for entry in out.prompt_logprobs[1:]:
                    d = {alt.token: Logprob(alt.logprob, rank, piece(alt.token))
                         for rank, alt in enumerate(entry.top, start=1)}
                    d[entry.token] = Logprob(entry.logprob, entry.rank, piece(entry.token))
                    prompt_logprobs.append(d)
            m = out.metrics
            results.append(RequestOutput(
                request_id=str(self._next_request_id),
                prompt=text if text is not None else (out.prompt or None),
                prompt_token_ids=list(out.prompt_token_ids), outputs=choices, finished=True,
                prompt_logprobs=prompt_logprobs,
                metrics=RequestMetrics(m.prompt_tokens, m.completion_tokens, m.cached_tokens,
                                       m.queue_s, m.ttft_s, m.prefill_s, m.decode_s, m.e2e_s),
                num_cached_tokens=m.cached_tokens, lora_request=lora))
            self._next_request_id += 1
        return results

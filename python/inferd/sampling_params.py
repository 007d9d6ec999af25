"""SamplingParams with vLLM's field names and defaults, and the structured-output parameters
(GuidedDecodingParams, the older spelling, and StructuredOutputsParams, the newer one)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any, Optional, Union

from . import _inferd


@dataclass
class StructuredOutputsParams:
    """At most one constraint: json (a schema: dict, JSON text, or a pydantic model class),
    regex, choice (the output is one of these strings), grammar (EBNF, start rule `root`), or
    json_object=True (any JSON object)."""

    json: Optional[Union[str, dict, Any]] = None
    regex: Optional[str] = None
    choice: Optional[list[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    # vLLM's knobs that pick among its backends; inferd has one (XGrammar), so they are accepted
    # and have no effect.
    backend: Optional[str] = None
    disable_fallback: bool = False
    disable_any_whitespace: bool = False
    disable_additional_properties: bool = False
    whitespace_pattern: Optional[str] = None
    structural_tag: Optional[str] = None

    def _apply(self, params: "_inferd.SamplingParams") -> None:
        given = [name for name in ("json", "regex", "choice", "grammar", "json_object")
                 if getattr(self, name) not in (None, False)]
        if len(given) > 1:
            raise ValueError(f"structured output: give one of json, regex, choice, grammar, "
                             f"json_object, not {', '.join(given)}")
        if self.structural_tag is not None:
            raise NotImplementedError("structured output: structural_tag is not supported by inferd")
        if self.json is not None:
            schema = self.json
            if hasattr(schema, "model_json_schema"):  # a pydantic model class
                schema = schema.model_json_schema()
            params.json_schema = schema if isinstance(schema, str) else json.dumps(schema)
        elif self.json_object:
            params.json_schema = '{"type": "object"}'
        elif self.regex is not None:
            params.regex = self.regex
        elif self.grammar is not None:
            params.grammar = self.grammar
        elif self.choice is not None:
            if not self.choice:
                raise ValueError("structured output: choice must not be empty")
            # One literal per choice in a grammar (not a regex, whose escaping differs between
            # dialects): EBNF string literals need only the quote and backslash escaped.
            def literal(text: str) -> str:
                return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"') + '"'
            params.grammar = "root ::= " + " | ".join(literal(c) for c in self.choice)


# vLLM's older name for the same thing (SamplingParams(guided_decoding=...)).
GuidedDecodingParams = StructuredOutputsParams


@dataclass
class SamplingParams:
    """vLLM's SamplingParams: same names, same defaults (temperature 1, top_p 1, top_k off,
    min_p 0, max_tokens 16). Fields inferd cannot honour raise NotImplementedError when set to
    anything but their default, rather than being ignored."""

    n: int = 1
    best_of: Optional[int] = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, list[str]]] = None
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    detokenize: bool = True
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: Optional[dict[int, float]] = None
    allowed_token_ids: Optional[list[int]] = None
    bad_words: Optional[list[str]] = None
    guided_decoding: Optional[StructuredOutputsParams] = None
    structured_outputs: Optional[StructuredOutputsParams] = None
    extra_args: Optional[dict[str, Any]] = None
    # inferd's own: beam search when > 0 (vLLM has it as LLM.beam_search with BeamSearchParams).
    beam_width: int = 0
    length_penalty: float = 1.0

    @classmethod
    def from_optional(cls, **kwargs: Any) -> "SamplingParams":
        return cls(**{k: v for k, v in kwargs.items() if v is not None})

    def clone(self) -> "SamplingParams":
        return SamplingParams(**{f.name: getattr(self, f.name) for f in fields(self)})

    def _unsupported(self) -> None:
        checks = {
            "best_of": self.best_of is None or self.best_of == self.n,
            "detokenize": self.detokenize,
        }
        bad = [name for name, ok in checks.items() if not ok]
        if bad:
            raise NotImplementedError(f"SamplingParams: inferd does not support {', '.join(bad)}")

    def _to_native(self, default_seed: Optional[int] = None) -> "_inferd.SamplingParams":
        """The C++ API's SamplingParams (include/inferd/sampling_params.h)."""
        self._unsupported()
        p = _inferd.SamplingParams()
        p.n = int(self.n)
        p.temperature = float(self.temperature)
        p.top_p = float(self.top_p)
        p.top_k = int(self.top_k) if self.top_k and self.top_k > 0 else 0
        p.min_p = float(self.min_p)
        p.repetition_penalty = float(self.repetition_penalty)
        # vLLM's repetition penalty looks at every prompt and output token, not the last 64
        # (llama.cpp's and `inferd run`'s default window).
        p.repeat_last_n = -1
        p.presence_penalty = float(self.presence_penalty)
        p.frequency_penalty = float(self.frequency_penalty)
        seed = self.seed if self.seed is not None else default_seed
        if seed is not None:
            p.seed = int(seed) & 0xFFFFFFFFFFFFFFFF
        # max_tokens None (vLLM: up to the context's end) is set by LLM, which knows the prompts.
        if self.max_tokens is not None:
            p.max_tokens = int(self.max_tokens)
        if self.stop:
            p.stop = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        p.ignore_eos = bool(self.ignore_eos)
        if self.stop_token_ids:
            p.stop_token_ids = [int(t) for t in self.stop_token_ids]
        p.min_tokens = int(self.min_tokens)
        p.include_stop_str_in_output = bool(self.include_stop_str_in_output)
        if self.allowed_token_ids:
            p.allowed_token_ids = [int(t) for t in self.allowed_token_ids]
        if self.bad_words:
            p.bad_words = [str(w) for w in self.bad_words]
        if self.logit_bias:
            p.logit_bias = [(int(t), float(b)) for t, b in self.logit_bias.items()]
        p.logprobs = -1 if self.logprobs is None else int(self.logprobs)
        p.prompt_logprobs = -1 if self.prompt_logprobs is None else int(self.prompt_logprobs)
        p.beam_width = int(self.beam_width)
        p.length_penalty = float(self.length_penalty)
        constraint = self.structured_outputs or self.guided_decoding
        if self.structured_outputs is not None and self.guided_decoding is not None:
            raise ValueError("SamplingParams: give structured_outputs or guided_decoding, not both")
        if constraint is not None:
            constraint._apply(p)
        return p

"""vLLM-shaped results: RequestOutput holding one CompletionOutput per choice, and Logprob."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union


@dataclass
class Logprob:
    """One token's log-probability (vLLM's Logprob): rank is its place among the most likely
    tokens at that position (1: the most likely), None when it was not among those returned."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    # Per generated token: {token id: Logprob} of the chosen token and the top alternatives
    # (SamplingParams.logprobs of them); None unless logprobs was asked for.
    logprobs: Optional[list[dict[int, Logprob]]]
    finish_reason: Optional[str] = None  # "stop", "length", "abort"
    # The stop string or the stop_token_ids entry that ended the output, if one did (vLLM's).
    stop_reason: Union[int, str, None] = None
    lora_request: Any = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    queue_s: float = 0.0
    ttft_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    e2e_s: float = 0.0


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    prompt_logprobs: Any = None
    metrics: Optional[RequestMetrics] = None
    num_cached_tokens: Optional[int] = None
    encoder_prompt: Optional[str] = None
    encoder_prompt_token_ids: Optional[list[int]] = None
    lora_request: Any = None


@dataclass
class StreamDelta:
    """inferd's own (vLLM's offline LLM does not stream): a piece of final text of choice
    `index` of prompt `prompt_index`, in order. The last delta of a choice has finished set
    (its text may be empty) and its finish_reason."""

    prompt_index: int
    index: int
    text: str
    finished: bool = False
    finish_reason: Optional[str] = None

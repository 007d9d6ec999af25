"""vLLM's prompt dictionaries: {"prompt": text} or {"prompt_token_ids": [ids]}."""

from typing import TypedDict, Union


class TextPrompt(TypedDict):
    prompt: str


class TokensPrompt(TypedDict, total=False):
    prompt_token_ids: list[int]  # required; "prompt" is optional (kept in the output)
    prompt: str


PromptType = Union[str, TextPrompt, TokensPrompt]

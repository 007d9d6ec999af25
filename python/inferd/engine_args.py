"""EngineArgs.add_cli_args: the command-line options of vLLM's example scripts that map to
LLM()'s arguments, so that `LLM(**vars(parser.parse_args()))` works as with vLLM."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Optional


@dataclass
class EngineArgs:
    model: str = ""
    max_model_len: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    seed: Optional[int] = None
    threads: Optional[int] = None
    device: Optional[str] = None
    chat_template: Optional[str] = None

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        group = parser.add_argument_group("Engine arguments (inferd)")
        group.add_argument("--model", type=str, default="",
                           help="GGUF model file (a Hugging Face name needs INFERD_SUBSTITUTE_MODEL)")
        group.add_argument("--max-model-len", type=int, default=None,
                           help="Tokens per sequence (default: the model's, at most 4096)")
        group.add_argument("--max-num-seqs", type=int, default=None,
                           help="Sequences decoded together")
        group.add_argument("--max-num-batched-tokens", type=int, default=None,
                           help="Tokens per engine step")
        group.add_argument("--seed", type=int, default=None, help="Seed for reproducible sampling")
        group.add_argument("--threads", type=int, default=None, help="Compute threads (inferd)")
        group.add_argument("--device", type=str, default=None, choices=["cpu", "cuda", "auto"],
                           help="cpu or cuda")
        group.add_argument("--chat-template", type=str, default=None,
                           help="Built-in chat template name or template file (inferd)")
        return parser

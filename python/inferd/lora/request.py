"""vLLM's LoRARequest: which LoRA adapter a generate() or chat() call runs with.

inferd reads llama.cpp's GGUF adapters (convert a PEFT adapter with llama.cpp's
convert_lora_to_gguf.py). The engine loads one the first time a request names its
lora_int_id, and applies it at scale 1 (alpha / rank, as PEFT does) to that request alone:
requests with different adapters, or none, run in the same engine steps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional


@dataclass(frozen=True)
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""
    lora_local_path: Optional[str] = None  # vLLM's older name of lora_path
    long_lora_max_len: Optional[int] = None
    base_model_name: Optional[str] = None
    tensorizer_config_dict: Optional[dict[str, Any]] = None

    def __post_init__(self) -> None:
        if not self.lora_path and self.lora_local_path:
            object.__setattr__(self, "lora_path", self.lora_local_path)
        if not self.lora_path:
            raise ValueError(f"LoRARequest {self.lora_name!r} has no lora_path")

    @property
    def adapter_id(self) -> int:
        return self.lora_int_id

    @property
    def name(self) -> str:
        return self.lora_name

    @property
    def path(self) -> str:
        return self.lora_path

"""vLLM's vllm.lora: LoRARequest (inferd.lora.request)."""
from .request import LoRARequest

__all__ = ["LoRARequest"]

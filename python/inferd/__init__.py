"""inferd for Python: vLLM's offline-inference API (LLM, SamplingParams, RequestOutput) over
inferd's engine, a C++ library that runs GGUF models on the CPU (or CUDA) with continuous
batching. See docs/PYTHON.md.

    from inferd import LLM, SamplingParams
    llm = LLM(model="SmolLM2-135M-Instruct.Q4_1.gguf")
    for out in llm.generate(["The capital of France is"], SamplingParams(temperature=0)):
        print(out.outputs[0].text)
"""

from . import _inferd
from .engine_args import EngineArgs
from .inputs import PromptType, TextPrompt, TokensPrompt
from .llm import LLM, GenerationStream, InferdError, Tokenizer
from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput, StreamDelta
from .sampling_params import GuidedDecodingParams, SamplingParams, StructuredOutputsParams

__version__ = _inferd.version()

__all__ = [
    "LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "Logprob", "RequestMetrics",
    "GuidedDecodingParams", "StructuredOutputsParams", "StreamDelta", "GenerationStream",
    "EngineArgs", "TextPrompt", "TokensPrompt", "PromptType", "Tokenizer", "InferdError",
]

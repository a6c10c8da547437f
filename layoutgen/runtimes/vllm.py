"""vLLM: declared in specs, not yet planned (its memory model is a budget, DESIGN §5).

vLLM takes ``gpu_memory_utilization`` x the card and fills what its weights,
activations and CUDA graphs leave with KV blocks; planning it beside
llama.cpp servers is issue 17.  Until then a vLLM service is refused by
``validate`` with that reason, and this module says so in one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from layoutgen.runtimes.base import Runtime


@dataclass(frozen=True)
class Vllm(Runtime):
    KIND: ClassVar[str] = "vllm"
    PLANNABLE: ClassVar[bool] = False

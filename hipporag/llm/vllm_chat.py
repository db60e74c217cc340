"""vLLM offline batch generation (`vllm.LLM`), for Llama-3.3-70B-class models on GPUs.

Optional: `pip install 'hipporag-harness[vllm]'`. Without vLLM (or without a GPU) it stops with a
message saying so; it never falls back to another backend.
"""

from __future__ import annotations

from hipporag.core.errors import MissingDependencyError
from hipporag.llm.generation import Generation


class VLLMChatLLM:
    def __init__(
        self,
        model: str,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        dtype: str = "auto",
        revision: str | None = None,
        identity: str | None = None,
    ):
        try:
            import vllm  # noqa: F401
        except ImportError as e:
            raise MissingDependencyError(
                "llm=vllm needs vLLM and a CUDA GPU: pip install 'hipporag-harness[vllm]'"
            ) from e
        self.model = model
        self.kwargs = {
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "dtype": dtype,
            **({"max_model_len": max_model_len} if max_model_len else {}),
            **({"revision": revision} if revision else {}),
        }
        self._llm = None
        self.identity = {
            "backend": "vllm",
            "model": model,
            **({"revision": revision} if revision else {}),
            **({"identity": identity} if identity else {}),
        }

    def _load(self):
        if self._llm is None:
            from vllm import LLM

            self._llm = LLM(model=self.model, **self.kwargs)
        return self._llm

    def generate(
        self,
        conversations: list[list[dict]],
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        desc: str = "LLM",
        seed: int | None = None,
        on_result=None,
    ) -> list[Generation]:
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=max_new_tokens, temperature=temperature, seed=seed)  # seed: one sample
        outputs = self._load().chat(conversations, params, use_tqdm=True)  # one engine call: they arrive together
        out = [
            Generation(
                text=o.outputs[0].text.strip(),
                input_tokens=len(o.prompt_token_ids or []),
                output_tokens=len(o.outputs[0].token_ids),
            )
            for o in outputs
        ]
        for i, g in enumerate(out if on_result is not None else []):
            on_result(i, g)
        return out

"""The LLM: one batched interface over its backends (`transformers_chat`, `openai_chat`, `vllm_chat`,
registered in `backends`), the response cache and usage counts every call goes through (`cached`), the
answer type they share (`generation`), and the reader that answers questions from retrieved texts (`reader`)."""

"""Prompt sets: every message sent to an LLM, as data (`prompt_set`), chosen by the `prompts` knob
(`loading`), and imported from a checkout of the official HippoRAG (`official`, `python -m hipporag.prompts`)."""

"""API keys come from the environment only: never from a config file, so they never reach a log,
metrics.json or W&B (see tracking.scrub_secrets for what is logged)."""

from __future__ import annotations

import os

from hipporag.core.errors import CredentialsError


def api_key_from_env(api_key_env: str, base_url: str | None, what: str) -> str:
    """The API key, from the environment only. The OpenAI API needs one; a local OpenAI-compatible
    server usually accepts anything, so a placeholder is sent there."""
    key = os.environ.get(api_key_env)
    if key:
        return key
    if base_url is None or "api.openai.com" in base_url:
        raise CredentialsError(
            f"{what} against the OpenAI API needs an API key in ${api_key_env}",
            hint=f"export {api_key_env}=..., or set base_url to a local OpenAI-compatible server",
        )
    return "no-key"

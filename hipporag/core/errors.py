"""Errors the user fixes (bad data, a bad knob, an unreachable LLM), told apart from bugs.

`python run.py` prints a `UserError` as one line with its hint and exits with code 2, no traceback
(HYDRA_FULL_ERROR=1 shows it); anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

EXIT_USER_ERROR = 2  # bad data, config or service: the message says what to fix
EXIT_DEGRADED = 3  # the run finished, but too many LLM calls failed: its files say "status": "degraded"
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it
EXIT_TERMINATED = 143  # SIGTERM (128 + 15): what Slurm sends on preemption and at the time limit


def first_line(error: BaseException, limit: int | None = None) -> str:
    """An exception's message as one line for a user's error line: its first line (libraries add advice and
    tracebacks below it), spaces folded, cut at `limit`; the exception's type name when it says nothing."""
    lines = str(error).strip().splitlines()
    text = " ".join(lines[0].split()) if lines else type(error).__name__
    return text[:limit] if limit else text


class UserError(Exception):
    """A problem in what the user gave us; `hint` says how to fix it."""

    hint: str = ""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    def one_line(self) -> str:
        text = " ".join(str(self).split())  # never more than one line, whatever the message held
        return f"{text} (hint: {self.hint})" if self.hint else text


class DatasetError(UserError, ValueError):
    """Bad or missing dataset input; the message names the file and the record."""

    hint = "fix the file, or point dataset= / dataset.questions / dataset.corpus elsewhere"


class SettingError(UserError, ValueError):
    """A knob with a value outside what it allows."""

    hint = "fix the value on the command line or in conf/"


class EndpointUnreachableError(UserError, RuntimeError):
    """A configured HTTP endpoint cannot be reached or refuses our credentials."""

    hint = "start the server, or fix embedder.base_url / embedder.model / the API key variable"


class LLMUnreachableError(EndpointUnreachableError):
    """The configured LLM endpoint cannot be reached or refuses our credentials."""

    hint = "start the server, or fix llm.base_url / llm.model / the API key variable"


class LLMFailureError(UserError, RuntimeError):
    """An LLM call failed and fail_on_llm_error=true asks to stop at the first failure."""

    hint = "fail_on_llm_error=false counts failures instead (the run is marked degraded above max_llm_error_rate)"


class MissingDependencyError(UserError, RuntimeError):
    """An optional package or a model file the chosen configuration needs is not installed."""


class CredentialsError(UserError, RuntimeError):
    """A service needs an API key that the environment does not hold."""


class CacheMismatchError(UserError, RuntimeError):
    """A cached artefact was produced by something other than what the run asks for."""

    hint = "remove that cache entry, or use another cache_dir"

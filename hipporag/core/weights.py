"""Model weights checked before any work: on disk, in the local Hugging Face cache, or on a reachable hub.

Why: a model loads at its first cache miss, which for the embedder comes after OpenIE has run; weights that
are neither on disk nor reachable (`embedder=contriever` with `HF_HUB_OFFLINE=1`) then ended the run in an
85-line traceback. The run asks here first and stops in one line naming the model and what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from hipporag.core.errors import MissingDependencyError, SettingError, first_line

T = TypeVar("T")

HUB_TIMEOUT_S = 10.0  # a reachable hub answers a model's metadata in well under this


def looks_local(source: str) -> bool:
    """A path rather than a hub id (`org/name` or `name`): absolute, relative with ./ or ../, or ~."""
    return source.startswith(("/", "./", "../", "~")) or Path(source).expanduser().exists()


def check_weights(source: str, what: str, revision: str | None = None) -> None:
    """Raise one `MissingDependencyError` line unless `source` (a local folder or a hub id) can load."""
    if looks_local(source):
        if not Path(source).expanduser().exists():
            raise MissingDependencyError(f"{what} weights not found: {source} does not exist")
        return
    from huggingface_hub import HfApi, constants, snapshot_download

    try:
        snapshot_download(source, revision=revision, local_files_only=True)
        return  # in the local Hugging Face cache
    except Exception:  # noqa: BLE001 - not cached (or cached in part): whether the hub can supply it decides
        pass
    if constants.HF_HUB_OFFLINE:
        raise MissingDependencyError(
            f"{what} {source} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE "
            "is set, so it cannot be downloaded",
            hint="download it where the hub is reachable (huggingface-cli download ...), unset HF_HUB_OFFLINE, "
            "or give a local folder (path=...)",
        )
    try:
        HfApi().model_info(source, revision=revision, timeout=HUB_TIMEOUT_S)
    except Exception as e:  # noqa: BLE001 - unreachable, unknown, gated: all end in one line
        raise MissingDependencyError(
            f"{what} {source} is not in the local Hugging Face cache and the hub did not supply it ({type(e).__name__}: {first_line(e, 200)})",
            hint="check the model id and the network, or give a local folder (path=...)",
        ) from e


def load_checkpoint(load: Callable[[], T], source: str, knob: str) -> T:
    """`load()` of a checkpoint that `check_weights` found: a folder the library cannot load (damaged, partial,
    another kind of model) is one `SettingError` naming the knob, never the library's traceback."""
    try:
        return load()
    except (KeyboardInterrupt, MemoryError):
        raise
    except Exception as e:  # noqa: BLE001 - every library raises its own kinds for a bad folder
        raise SettingError(
            f"{knob}={source}: not a checkpoint that loads ({type(e).__name__}: {first_line(e, 200)})",
            hint="point it at a complete checkpoint (its config, tokenizer and weights) or a hub id",
        ) from None

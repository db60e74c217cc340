"""Which prompt set a run uses: the `prompts` knob, resolved once at start-up.

`prompts=default` (or any name of hipporag/prompts/sets/*.yaml) picks a shipped set; a path picks a file
written in the same layout, or a folder of them (`python -m hipporag.prompts import-official` writes one
per dataset template it finds). From a folder the dataset's own file is taken by the official rule of
HippoRAG.qa (`rag_qa_{dataset}` when it exists, else MuSiQue's): `<dataset>.yaml`, then the dataset's name
without a `_<subset>` suffix (`musique_train` -> `musique.yaml`, `2wikimultihopqa_30` -> `2wikimultihopqa.yaml`),
then `musique.yaml`.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

import yaml

from hipporag.core.safe_yaml import YAMLRefused, YAMLTooLarge, load_file
from hipporag.prompts.prompt_set import PromptSet, PromptSetError, parse_prompt_set

log = logging.getLogger(__name__)

SHIPPED_DIR = Path(__file__).resolve().parent / "sets"
FALLBACK = "musique"  # the official code's fallback template (HippoRAG.qa)
# The largest prompt file read. The shipped set is 4.5 KB; `import-official` writes 22-24 KB per dataset and
# `import-legacy-ircot` at most 89 KB (every demonstration, --num-demo 1000). 1 MiB is ~250k tokens, beyond
# the context the harness's readers run with; a 50 MB file took a minute and 1.1 GB to parse.
MAX_PROMPT_FILE_BYTES = 1 << 20


def shipped_names() -> list[str]:
    return sorted(p.stem for p in SHIPPED_DIR.glob("*.yaml"))


def folder_choice(folder: Path, dataset: str) -> Path:
    """The file of `folder` a dataset uses (the official rag_qa_{dataset} rule, with its MuSiQue fallback)."""
    stem = dataset.rsplit("_", 1)[0] if "_" in dataset else dataset
    for name in dict.fromkeys((dataset, stem, FALLBACK)):
        path = folder / f"{name}.yaml"
        if path.is_file():
            if name == FALLBACK and FALLBACK not in (dataset, stem):
                log.info("Prompts: %s has no %s.yaml; using %s.yaml, as the official code does", folder, dataset, name)
            return path
    have = ", ".join(sorted(p.name for p in folder.glob("*.yaml"))) or "no .yaml files"
    raise PromptSetError(f"prompts={folder}: no {dataset}.yaml, {stem}.yaml or {FALLBACK}.yaml there ({have})")


def prompt_file(value: str, dataset: str) -> Path:
    """The file the `prompts` knob names for this dataset."""
    if value in shipped_names():
        return SHIPPED_DIR / f"{value}.yaml"
    path = Path(value).expanduser()
    if path.is_dir():
        return folder_choice(path, dataset)
    if path.is_file():
        return path
    raise PromptSetError(
        f"prompts={value!r}: neither a shipped set ({', '.join(shipped_names())}) nor an existing file or folder"
    )


@functools.lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int) -> PromptSet:
    """A prompt file parsed: its size checked before it is read, anchors and aliases refused (a set has no use
    for them, and an alias bomb would load at once and explode only when the run's files are written)."""
    try:
        data = load_file(Path(path), MAX_PROMPT_FILE_BYTES)
    except YAMLTooLarge as e:
        raise PromptSetError(f"{path}: {e.size:,} bytes, over the {e.limit:,}-byte limit of a prompt file") from None
    except YAMLRefused as e:
        raise PromptSetError(f"{path}: {e}") from None
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        first = " ".join(str(e).split())[:200]
        raise PromptSetError(f"{path}: not a readable YAML prompt set: {first}") from e
    return parse_prompt_set(data, path)


def read_prompt_set(path: Path) -> PromptSet:
    path = Path(path)
    return _read(str(path), path.stat().st_mtime_ns)


def load_prompts(value: str, dataset: str) -> PromptSet:
    """The prompt set of a run (PromptSetError, one line, for a bad name, file or set)."""
    return read_prompt_set(prompt_file(value, dataset))


def shipped(name: str = "default") -> PromptSet:
    return read_prompt_set(SHIPPED_DIR / f"{name}.yaml")

"""Datasets from the Hugging Face hub: the HippoRAG 2 release (`osunlp/HippoRAG_2`).

The release holds `{name}.json` (questions) and `{name}_corpus.json` (corpus) per benchmark, in the
formats `hipporag.data` parses; only the download lives here (`python -m hipporag.prepare_datasets` copies
the files into the data directory). Without a network (or with HF_HUB_OFFLINE=1 and nothing cached) it
fails with a message saying what it tried and what to do instead.
"""

from __future__ import annotations

from pathlib import Path

from hipporag.core.errors import DatasetError, first_line

HIPPORAG2_REPO = "osunlp/HippoRAG_2"


def _offline() -> bool:
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - a dependency of transformers
        return False
    return bool(constants.HF_HUB_OFFLINE)


def download_hipporag2_dataset(repo_id: str, name: str, revision: str | None = None) -> tuple[Path, Path]:
    """(questions, corpus) paths in the local HF cache; downloads what the cache lacks."""
    from huggingface_hub import hf_hub_download

    files = []
    for filename in (f"{name}.json", f"{name}_corpus.json"):
        try:
            files.append(
                Path(hf_hub_download(repo_id=repo_id, filename=filename, repo_type="dataset", revision=revision))
            )
        except Exception as e:  # offline, unknown file, no network: all end here with one clear message
            offline = (
                "HF_HUB_OFFLINE is set, so only the local HF cache was searched: unset it on a machine "
                "with network access. "
                if _offline()
                else ""
            )
            raise DatasetError(
                f"could not fetch {filename} from the Hugging Face dataset {repo_id} (revision "
                f"{revision or 'main'}; {type(e).__name__}: {first_line(e)}). {offline}"
                "This needs network access to the hub (or a warm HF cache). Offline, download the two files "
                "elsewhere and run with dataset=files dataset.questions=... dataset.corpus=..., or put them in "
                "your data directory (HIPPORAG_DATA_DIR)."
            ) from e
    return files[0], files[1]


def snapshot_commit(path: Path) -> str | None:
    """The hub commit a cached file belongs to: hf_hub_download returns .../snapshots/<commit>/<file>."""
    path = Path(path)
    return path.parent.name if path.parent.parent.name == "snapshots" else None

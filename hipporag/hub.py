"""Datasets from the Hugging Face hub: the HippoRAG 2 release (`osunlp/HippoRAG_2`).

The release holds `{name}.json` (questions) and `{name}_corpus.json` (corpus) per benchmark, in the
formats `hipporag.data` parses; only the download lives here. Without a network (or with
HF_HUB_OFFLINE=1 and nothing cached) it fails with a message saying what to do instead.
"""

from __future__ import annotations

from pathlib import Path

from .data import DatasetError

HIPPORAG2_REPO = "osunlp/HippoRAG_2"


def download_hipporag2_dataset(repo_id: str, name: str, revision: str | None = None) -> tuple[Path, Path]:
    from huggingface_hub import hf_hub_download

    files = []
    for filename in (f"{name}.json", f"{name}_corpus.json"):
        try:
            files.append(Path(hf_hub_download(repo_id=repo_id, filename=filename, repo_type="dataset", revision=revision)))
        except Exception as e:  # offline, unknown file, no network: all end here with one clear message
            raise DatasetError(
                f"could not fetch {filename} from the Hugging Face dataset {repo_id} ({type(e).__name__}: {e}). "
                "This needs network access to the hub (or a warm HF cache). Offline, download the two files "
                "elsewhere and run with dataset=files dataset.questions=... dataset.corpus=..., or put them in "
                "your data directory (HIPPORAG_DATA_DIR)."
            ) from e
    return files[0], files[1]

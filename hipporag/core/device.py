"""Which accelerator a stage runs on, chosen once and reported in the run record."""

from __future__ import annotations


def pick_device(requested: str | None = "auto") -> str:
    """'auto' means CUDA when torch sees a GPU, else CPU; anything else is passed through."""
    if requested not in (None, "auto"):
        return requested
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def describe_device(device: str) -> dict:
    info = {"device": device}
    if device.startswith("cuda"):
        import torch

        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1))
    return info

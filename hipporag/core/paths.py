"""Where the checkout keeps what the package reads: the config groups (conf/) and reproduce/ (the default
data directory, the papers' numbers). The harness runs from a checkout: `python run.py`."""

from __future__ import annotations

from pathlib import Path

from hipporag.core.errors import SettingError

REPO_ROOT = Path(__file__).resolve().parents[2]
CONF_DIR = REPO_ROOT / "conf"
REPRODUCE_DIR = REPO_ROOT / "reproduce"


def group_config(group: str, option: str) -> dict:
    """A shipped config group option (`conf/<group>/<option>.yaml`) as plain data: a part's defaults."""
    from omegaconf import OmegaConf

    path = CONF_DIR / group / f"{option}.yaml"
    if not path.is_file():
        raise SettingError(f"{group}={option!r}: there is no {path}")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)

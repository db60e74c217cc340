"""The project's own OmegaConf resolvers, registered before any config is composed (run.py, `compose`).

- `${unique_suffix:}`: runs started in the same second get different folders (hydra.run.dir / sweep.dir).
  Cached, so every use within one run (and each sweep job's copy) sees one value.
- `${ircot_max_steps:${dataset.name}}`: the v1 paper's IRCoT step limit for a dataset (Appendix H: at most 4
  retrievals on MuSiQue, 2 on 2WikiMultiHopQA and HotpotQA), so one preset carries every dataset's limit. A
  dataset whose name contains "musique" gets 4, any other 2 (the paper's rule for the two others).
"""

from __future__ import annotations

import secrets

NAMES = ("unique_suffix", "ircot_max_steps")


def ircot_max_steps(dataset: str) -> int:
    return 4 if "musique" in str(dataset).lower() else 2


def register() -> None:
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver("unique_suffix"):
        OmegaConf.register_new_resolver("unique_suffix", lambda: secrets.token_hex(3), use_cache=True)
    if not OmegaConf.has_resolver("ircot_max_steps"):
        OmegaConf.register_new_resolver("ircot_max_steps", ircot_max_steps)

"""Entry point: `python run.py` runs one experiment; `python run.py -m damping=0.3,0.5,0.7` sweeps."""

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from hipporag.entry import register_resolvers

register_resolvers()  # before Hydra composes the config: hydra.run.dir uses ${unique_suffix:}


@hydra.main(version_base=None, config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from hipporag.entry import run_main  # settings are checked before any heavy import

    hc = HydraConfig.get()
    group = Path(hc.sweep.dir).name if hc.mode.name == "MULTIRUN" else None
    run_main(cfg, Path(hc.runtime.output_dir), sweep_group=group)


if __name__ == "__main__":
    from hipporag.core import termination

    termination.install()  # SIGTERM (Slurm's preemption and time limit) ends like Ctrl-C, exit 143
    import sys

    from hipporag.entry import precheck_command_line

    precheck_command_line(sys.argv[1:])  # Hydra's refusals of the command line: one line, exit 2
    try:
        main()
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM outside the experiment (Hydra's start or teardown)
        from hipporag.entry import interrupted

        interrupted(e)

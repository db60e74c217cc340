"""Every knob is checked at start-up by one schema: good defaults pass, each bad value names itself."""

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from hipporag.errors import SettingError
from hipporag.settings import GROUP_KEYS, TOP_LEVEL, check_settings

CONF = Path(__file__).resolve().parents[1] / "conf"


def config(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose("config", overrides=list(overrides))


def test_every_top_level_knob_has_a_rule():
    cfg = config()
    knobs = {k for k in cfg if k not in ("dataset", "method", "extractor", "embedder", "llm", "reader", "tracker")}
    assert knobs == set(TOP_LEVEL)


@pytest.mark.parametrize("overrides", [
    [], ["method=bm25"], ["method=raptor"], ["method=hipporag"], ["llm=openai"], ["llm=vllm"], ["dataset=musique_train"],
    ["extractor=imported"], ["extractor=llm"], ["embedder=openai"], ["baseline=null"], ["ppr_device=cuda:1"],
    ["damping=0"], ["damping=0.99"], ["+ablation=full"],
])
def test_shipped_configs_pass(overrides):
    check_settings(config(*overrides))


@pytest.mark.parametrize("override, message", [
    ("retrieval_top_k=0", "retrieval_top_k=0 is not allowed: expected an integer >= 1"),
    ("linking_top_k=0", "linking_top_k=0 is not allowed: expected an integer >= 1"),
    ("qa_top_k=-3", "qa_top_k=-3 is not allowed"),
    ("passage_node_weight=-1", "passage_node_weight=-1 is not allowed: expected a number >= 0"),
    ("damping=1.5", "damping=1.5 is not allowed: expected a number in [0, 1)"),
    ("damping=1", "damping=1 is not allowed"),
    ("damping=abc", "damping='abc' is not allowed"),
    ("filter=maybe", "filter='maybe' is not allowed: expected one of none, llm"),
    ("passage_nodes=3", "passage_nodes=3 is not allowed: expected true or false"),
    ("retrieval_top_k=2.5", "retrieval_top_k=2.5 is not allowed"),
    ("ppr_device=gpu", "ppr_device='gpu' is not allowed: expected auto, cpu, cuda or cuda:N"),
    ("baseline=nope", "baseline='nope' is not allowed: expected one of bm25, dense, hipporag, hipporag2, raptor or null"),
    ("max_llm_error_rate=2", "max_llm_error_rate=2 is not allowed: expected a number in [0, 1]"),
    ("filter_prompt=/no/such/file.json", "filter_prompt='/no/such/file.json' is not allowed: expected the path of an existing file"),
    ("dataset.limit=0", "dataset.limit=0 is not allowed: expected an integer >= 1 or null"),
    ("llm.temperature=-0.1", "llm.temperature=-0.1 is not allowed: expected a number >= 0"),
    ("embedder.batch_size=0", "embedder.batch_size=0 is not allowed"),
])
def test_bad_values_are_refused_with_the_knob_named(override, message):
    with pytest.raises(SettingError) as e:
        check_settings(config(override))
    assert message in str(e.value)
    assert "\n" not in e.value.one_line()


def test_group_rules_name_real_group_keys():
    """A rule for a key no shipped group has would never run: every GROUP_KEYS entry exists somewhere."""
    shipped = set()
    for group in ("dataset", "method", "extractor", "embedder", "llm", "reader", "tracker"):
        for path in (CONF / group).glob("*.yaml"):
            cfg = config(f"{group}={path.stem}")
            shipped |= {f"{group}.{k}" for k in cfg[group]}
    assert set(GROUP_KEYS) <= shipped, set(GROUP_KEYS) - shipped


GROUPS = ("dataset", "method", "extractor", "embedder", "llm", "reader", "tracker", "ablation")


@pytest.mark.parametrize("option", [f"{g}={p.stem}" if g != "ablation" else f"+ablation={p.stem}"
                                    for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))])
def test_every_config_group_option_composes_and_validates(option):
    check_settings(config(option))


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")))
def test_every_experiment_preset_and_each_of_its_sweep_values_validates(preset):
    """Each job a preset would launch: the preset plus one value of each swept knob, composed and checked."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose("config", overrides=[f"+experiment={preset}"], return_hydra_config=True)
        sweep = dict(cfg.hydra.sweeper.params or {})
        assert sweep, f"{preset}: sweeps nothing"
        for knob, values in sweep.items():
            for value in str(values).split(","):
                job = compose("config", overrides=[f"+experiment={preset}", f"{knob}={value}"])
                check_settings(job)

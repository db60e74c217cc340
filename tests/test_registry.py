"""A method is declared once, in its module: the settings check, the ranking cache, the paper comparison and
`get_method` all read that declaration."""

import pytest
from omegaconf import OmegaConf

from hipporag.errors import SettingError
from hipporag.methods import METHODS, get_method, register_method
from hipporag.ranking_cache import ranking_key
from hipporag.reproduce import ablation_knobs
from hipporag.rules import integer
from hipporag.settings import check_settings
from test_settings import config


@pytest.fixture
def toy_method():
    @register_method("toy", cache_knobs=("method_options", "damping"), options={"depth": integer(1)},
                     setting_fields=("retriever", "llm"), llm_role="toy LLM", ablation_knobs=("passage_nodes",))
    class Toy:
        def __init__(self, options=None):
            self.options = options

        def retrieve(self, ctx, queries):
            return []

    yield Toy
    del METHODS["toy"]


def test_a_registered_method_is_known_everywhere(toy_method):
    cfg = config()
    cfg.method = OmegaConf.create({"name": "toy", "depth": 2})
    check_settings(cfg)
    built = get_method("toy", {"depth": 2})
    assert isinstance(built, toy_method) and built.options == {"depth": 2} and built.name == "toy"
    key = lambda **p: ranking_key("index", "toy", {"method_options": {"depth": 2}, "damping": 0.5, **p}, ["q"])
    assert key() != key(damping=0.7) and key() == key(passage_node_weight=0.3)
    assert ablation_knobs("toy") == ("passage_nodes",)
    cfg.method.depth = 0
    with pytest.raises(SettingError, match=r"method.depth=0 is not allowed: expected an integer >= 1"):
        check_settings(cfg)
    cfg.method = OmegaConf.create({"name": "toy", "dept": 2})
    with pytest.raises(SettingError, match=r"method.dept is not an option of method toy \(its options: depth\)"):
        check_settings(cfg)


def test_a_name_is_registered_once_and_llm_knobs_need_a_rule(toy_method):
    with pytest.raises(ValueError, match="registered twice"):
        register_method("toy")(type("Other", (), {}))
    with pytest.raises(ValueError, match="declares LLM knobs but no uses_llm rule"):
        register_method("toy2", cache_knobs=("llm",))(type("Other", (), {}))
    assert "toy2" not in METHODS


def test_the_shipped_methods_are_registered_with_their_yaml_options():
    for name, spec in METHODS.items():
        yaml_keys = set(config(f"method={name}").method) - {"name"}
        assert yaml_keys == set(spec.options), name  # each YAML option has a rule, each rule a default


def _registries():
    from hipporag.data import DATASET_SOURCES
    from hipporag.embed import EMBEDDERS
    from hipporag.llm import LLM_BACKENDS
    from hipporag.openie import EXTRACTORS
    from hipporag.tracking import TRACKERS

    return {"dataset": (DATASET_SOURCES, "source"), "extractor": (EXTRACTORS, "name"), "embedder": (EMBEDDERS, "backend"),
            "llm": (LLM_BACKENDS, "backend"), "tracker": (TRACKERS, "name")}


@pytest.mark.parametrize("group", ["dataset", "extractor", "embedder", "llm", "tracker"])
def test_every_registered_part_is_shipped_as_a_config_and_every_config_names_one(group):
    from test_settings import CONF

    registry, key = _registries()[group]
    used = {config(f"{group}={p.stem}")[group][key] for p in (CONF / group).glob("*.yaml")}
    assert used == set(registry.names()), group


def test_an_unknown_part_is_refused_naming_the_knob_and_the_choices():
    from hipporag.registry import Registry

    parts = Registry("widget", "widget.name")
    parts.register("a")(lambda: 1)
    with pytest.raises(SettingError, match=r"widget.name='b' is not allowed: expected one of a"):
        parts.build("b")
    with pytest.raises(ValueError, match="registered twice"):
        parts.register("a")(lambda: 2)
    cfg = config()
    cfg.dataset.source = "ftp"
    with pytest.raises(SettingError, match=r"dataset.source='ftp' is not allowed: expected one of demo, data_dir, files, hub"):
        check_settings(cfg)

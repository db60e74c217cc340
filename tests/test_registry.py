"""A part is declared once, beside its code: its name, its typed options (defaults in its YAML file only), and
for methods what their ranking depends on. The settings check, the factories, the ranking cache and the paper
comparison all read that declaration."""

import dataclasses
from dataclasses import dataclass

import numpy as np
import pytest
from omegaconf import OmegaConf

from hipporag.core.errors import SettingError
from hipporag.core.paths import CONF_DIR, group_config
from hipporag.core.registry import Configured, Registry, construct, option
from hipporag.core.rules import integer, text
from hipporag.harness.settings import REGISTRIES, compose, load_settings
from hipporag.paper.compare import ablation_knobs
from hipporag.paper.labels import LABELS, PaperLabels
from hipporag.retrieval.methods import METHODS, get_method, register_method
from hipporag.retrieval.ranking_cache import ranking_base


@dataclass(frozen=True)
class ToyOptions:
    depth: int = option(integer(1))


@pytest.fixture
def toy_method(tmp_path, monkeypatch):
    @register_method("toy", options=ToyOptions)
    class Toy:
        def __init__(self, options):
            self.options = options

        def retrieve(self, ctx, queries):
            return []

    # its defaults come from its YAML file only: conf/method/toy.yaml, here read from a temporary folder
    (tmp_path / "method").mkdir()
    (tmp_path / "method" / "toy.yaml").write_text("name: toy\ndepth: 2\n")
    shipped = lambda group, name: (
        OmegaConf.to_container(OmegaConf.load(tmp_path / group / f"{name}.yaml"))
        if name == "toy"
        else group_config(group, name)
    )
    monkeypatch.setattr("hipporag.retrieval.methods.registry.group_config", shipped)
    # the papers' words for it, where the paper comparison reads them
    monkeypatch.setitem(
        LABELS, "toy", PaperLabels(setting_fields=("retriever", "llm"), ablation_knobs=("passage_nodes",))
    )
    yield Toy
    METHODS.remove("toy")


def test_a_registered_method_is_known_everywhere(toy_method):
    cfg = compose()
    cfg.method = OmegaConf.create({"name": "toy", "depth": 2})
    assert load_settings(cfg).method.options == ToyOptions(depth=2)
    built = get_method("toy")
    assert isinstance(built, toy_method) and built.options == ToyOptions(depth=2) and built.name == "toy"
    assert get_method("toy", {"depth": 5}).options.depth == 5
    base = lambda depth: ranking_base("index", "toy", {"method_options": {"name": "toy", "depth": depth}}, ["q"])
    assert base(2) != base(3)  # its options are in every key of its rankings; what else it reads, as it runs
    assert ablation_knobs("toy") == ("passage_nodes",)
    cfg.method.depth = 0
    with pytest.raises(SettingError, match=r"method.depth=0 is not allowed: expected an integer >= 1"):
        load_settings(cfg)
    cfg.method = OmegaConf.create({"name": "toy", "dept": 2})
    with pytest.raises(SettingError, match=r"method.dept is not an option of method toy \(its options: depth\)"):
        load_settings(cfg)
    cfg.method = OmegaConf.create({"name": "toy"})
    with pytest.raises(SettingError, match=r"method.depth is missing from the config of method toy"):
        load_settings(cfg)


def test_a_name_is_registered_once(toy_method):
    with pytest.raises(ValueError, match="registered twice"):
        register_method("toy")(type("Other", (), {}))


def _declared(configured: Configured) -> set[str]:
    return {f.name for f in dataclasses.fields(configured.part.options)} if configured.part.options else set()


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_every_shipped_yaml_sets_exactly_the_options_its_part_declares(group):
    """Defaults live in the YAML only: each file of conf/<group>/ sets every declared option and nothing else
    (the check itself would refuse the extra key or the missing one; here each file is read as shipped)."""
    registry = REGISTRIES[group]
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        shipped = group_config(group, path.stem)
        configured = registry.configure(shipped)
        assert set(shipped) - {registry.selector} == _declared(configured), path.name


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_every_registered_part_is_shipped_as_a_config_and_every_config_names_one(group):
    registry = REGISTRIES[group]
    used = {group_config(group, p.stem)[registry.selector] for p in (CONF_DIR / group).glob("*.yaml")}
    assert used == set(registry.names()), group


def test_code_keeps_no_defaults_the_options_are_all_required():
    """A default in an options dataclass would be a second place for it: every option field has none."""
    for registry in REGISTRIES.values():
        for name, part in registry.items():
            for f in dataclasses.fields(part.options or ToyOptions):
                assert f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING, (name, f.name)


def test_an_unknown_part_is_refused_naming_the_knob_and_the_choices():
    @dataclass(frozen=True)
    class WidgetOptions:
        colour: str = option(text())

    parts = Registry("widget", group="widget", selector="name")
    parts.register("a", options=WidgetOptions)(lambda o: o.colour)
    with pytest.raises(SettingError, match=r"widget.name='b' is not allowed: expected one of a"):
        parts.build({"name": "b"})
    assert parts.build({"name": "a", "colour": "red"}) == "red"
    with pytest.raises(ValueError, match="registered twice"):
        parts.register("a")(lambda o: 2)
    cfg = compose()
    cfg.dataset.source = "ftp"
    with pytest.raises(
        SettingError, match=r"dataset.source='ftp' is not allowed: expected one of demo, data_dir, files, hub"
    ):
        load_settings(cfg)


def test_construct_takes_each_constructor_parameter_from_its_option():
    @dataclass(frozen=True)
    class Opts:
        depth: int = option(integer(1))
        label: str = option(text())
        unused: int = option(integer(0))  # an option the part's constructor does not take

    class Part:
        def __init__(self, depth: int, label: str = "?", spare: int = 7):
            self.values = (depth, label, spare)

    assert construct(Part, Opts(depth=3, label="x", unused=1)).values == (3, "x", 7)

    class Needs:
        def __init__(self, missing: int):
            pass

    with pytest.raises(TypeError, match="missing"):
        construct(Needs, Opts(depth=1, label="x", unused=0))


@pytest.mark.parametrize(
    "part, options",
    [
        (
            "hipporag.index.embedders.sentence_transformers:SentenceTransformerEmbedder",
            "hipporag.index.embedders.sentence_transformers:SentenceTransformersOptions",
        ),
        (
            "hipporag.index.embedders.openai_endpoint:OpenAIEmbedder",
            "hipporag.index.embedders.openai_endpoint:OpenAIEmbedderOptions",
        ),
        ("hipporag.llm.transformers_chat:TransformersChatLLM", "hipporag.llm.backends:TransformersOptions"),
        ("hipporag.llm.openai_chat:OpenAIChatLLM", "hipporag.llm.backends:OpenAIOptions"),
        ("hipporag.llm.vllm_chat:VLLMChatLLM", "hipporag.llm.backends:VLLMOptions"),
    ],
)
def test_parts_built_by_construct_have_an_option_for_every_parameter(part, options):
    """A constructor parameter without an option would silently keep its code default: the YAML could not set it."""
    import importlib
    import inspect

    load = lambda ref: getattr(importlib.import_module(ref.split(":")[0]), ref.split(":")[1])
    params = set(inspect.signature(load(part)).parameters)
    fields = {f.name for f in dataclasses.fields(load(options))}
    assert params <= fields, f"{part} takes {sorted(params - fields)}, which no option of {options} sets"


@pytest.mark.parametrize(
    "variant, base, switch",
    [
        ("hipporag_colbertv2", "hipporag", {"linker": "colbertv2"}),
        ("proposition_colbertv2", "proposition", {"retriever": "colbertv2"}),
        ("raptor_colbertv2", "raptor", {"retriever": "colbertv2"}),
    ],
)
def test_a_method_variant_file_differs_from_its_method_in_its_switch_alone(variant, base, switch):
    """A second file of a method (for presets to sweep) repeats the method's options: none may drift."""
    assert group_config("method", variant) == {**group_config("method", base), **switch}


def test_an_embedder_is_checked_against_the_interface_when_it_registers():
    from hipporag.index.embedders import EMBEDDERS, EmbedderOptions, QueryInstructions, register_embedder

    class Half(QueryInstructions):  # encodes, but cannot say whether its weights load
        def __init__(self, model, batch_size, instructions, instruction_template):
            self.identity, self.batch_size = {"name": "half", "model": model}, batch_size
            self.instructions, self.instruction_template = instructions, instruction_template

        def encode(self, texts, prefix="", progress=False):
            return np.ones((len(texts), 2), dtype=np.float32) / np.sqrt(2)

    with pytest.raises(TypeError, match=r"embedder 'half' \(Half\) lacks check_weights of the Embedder interface"):
        register_embedder("half", options=EmbedderOptions)(Half)
    assert "half" not in EMBEDDERS
    Half.check_weights = lambda self: None
    try:
        register_embedder("half", options=EmbedderOptions)(Half)
        shipped = {
            "model": "m",
            "batch_size": 4,
            "instructions": {"query_to_passage": "Q"},
            "instruction_template": "{instruction}: ",
        }
        built = EMBEDDERS.build({"backend": "half", **shipped})
        assert isinstance(built, Half) and built.query_prefix("query_to_passage") == "Q: " and built.batch_size == 4
    finally:
        EMBEDDERS.remove("half")


def test_every_shipped_embedder_keeps_the_interface():
    """Each shipped embedder config builds an `Embedder` (no weights load: they load at the first text)."""
    from hipporag.index.embedders import EMBEDDERS, Embedder

    for path in sorted((CONF_DIR / "embedder").glob("*.yaml")):
        shipped = group_config("embedder", path.stem)
        if shipped["backend"] == "openai":  # its constructor reads an API key from the environment
            continue
        assert isinstance(EMBEDDERS.build(shipped), Embedder), path.name

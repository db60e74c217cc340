"""A run's whole configuration, typed and checked once at start-up, before any work: `Settings`.

A bad value (`retrieval_top_k=0`, `damping=1.5`, `filter=maybe`, `embedder.batch_size=0`) stops the run
within seconds with one line naming the knob, the value and what is allowed, not after the index has
loaded, and never silently (`linking_top_k=0` once turned HippoRAG 2 into dense retrieval without a
word). An unknown key of a config group is refused the same way (a typo would otherwise be ignored).

What is checked, and where it is declared:
- the top-level knobs: `hipporag.core.knobs.Knobs` (type, rule and class of each);
- each config group: the registry of its kind (`dataset.source`, `method.name`, `extractor.name`,
  `embedder.backend`, `llm.backend`, `tracker.name` pick the part; the part's options dataclass checks
  the rest); the reader: `hipporag.llm.reader.ReaderOptions`; the questions asked:
  `hipporag.data.selection.QuestionOptions`; the prompt set named by the `prompts` knob:
  `hipporag.prompts` (read and checked here, so a bad prompt file stops the run before any work).
The stages are handed the typed objects; the composed config itself is kept only for the run's records
(resolved_config.yaml, the W&B config).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hipporag.core.errors import SettingError
from hipporag.core.knobs import Knobs
from hipporag.core.registry import Configured, Registry
from hipporag.data.selection import QuestionOptions
from hipporag.data.sources import DATASET_SOURCES
from hipporag.harness.tracking import TRACKERS
from hipporag.index.embed import EMBEDDERS
from hipporag.index.openie import EXTRACTORS
from hipporag.llm.backends import LLM_BACKENDS
from hipporag.llm.reader import ReaderOptions
from hipporag.prompts.loading import load_prompts
from hipporag.prompts.prompt_set import PromptSet
from hipporag.retrieval.methods import METHODS, method_options

GROUPS = ("dataset", "method", "extractor", "embedder", "llm", "reader", "tracker", "questions", "judge_llm")
# questions: absent from configs saved before it existed (a rerun of an older run): all; judge_llm: chosen only
# with `llm@judge_llm=<conf/llm option>` (metric=llm_judge's judge, when not the run's llm)
OPTIONAL_GROUPS = ("questions", "judge_llm")

# the registry of each config group that picks a part (the reader is one fixed part)
REGISTRIES: dict[str, Registry] = {
    "dataset": DATASET_SOURCES,
    "method": METHODS,
    "extractor": EXTRACTORS,
    "embedder": EMBEDDERS,
    "llm": LLM_BACKENDS,
    "tracker": TRACKERS,
}


@dataclass(frozen=True)
class Settings:
    knobs: Knobs
    dataset: Configured
    method: Configured
    baseline: Configured | None  # the baseline method with its own YAML options; None: none, or the method itself
    extractor: Configured
    embedder: Configured
    llm: Configured
    reader: ReaderOptions
    tracker: Configured
    questions: QuestionOptions
    prompts: PromptSet
    judge_llm: Configured | None = None  # metric=llm_judge's LLM when it is not the run's (`llm@judge_llm=...`)

    def methods_to_run(self) -> list[Configured]:
        """The method, then the baseline scored on the same queries."""
        return [self.method] + ([self.baseline] if self.baseline is not None else [])


def _baseline(knobs: Knobs, method: Configured) -> Configured | None:
    if knobs.baseline is None or knobs.baseline == method.name:
        return None
    if knobs.baseline not in METHODS:
        raise SettingError(
            f"baseline={knobs.baseline!r} is not allowed: expected one of {', '.join(sorted(METHODS))} or null"
        )
    return method_options(knobs.baseline)


def load_settings(cfg: Mapping) -> Settings:
    """The typed settings of a composed config; SettingError (one line) for the first bad or unknown value."""
    missing = [g for g in GROUPS if g not in cfg and g not in OPTIONAL_GROUPS]
    if missing:
        raise SettingError(f"the config has no {missing[0]} group (conf/config.yaml's defaults list names it)")
    if isinstance(cfg["dataset"], Mapping) and "limit" in cfg["dataset"]:  # where it lived before the group
        raise SettingError("dataset.limit is now questions.limit (and questions.ids=[...] names questions by id)")
    knobs = Knobs.from_config(cfg, GROUPS)
    parts = {group: registry.configure(cfg[group]) for group, registry in REGISTRIES.items()}
    prompts = load_prompts(knobs.prompts, str(cfg["dataset"].get("name") or ""))
    _check_prompt_roles(parts["method"], prompts)
    settings = Settings(
        knobs=knobs,
        baseline=_baseline(knobs, parts["method"]),
        reader=ReaderOptions.from_config(cfg["reader"]),
        questions=QuestionOptions.from_config(cfg.get("questions")),
        prompts=prompts,
        judge_llm=LLM_BACKENDS.configure(cfg["judge_llm"], "judge_llm") if cfg.get("judge_llm") is not None else None,
        **parts,
    )
    _check_judge(settings)
    _check_sampling(settings)
    for method in settings.methods_to_run():  # a compared system's library: installed, its pinned version
        check = METHODS[method.name].check
        if check is not None:
            check(method.options)
    return settings


def _check_sampling(settings: Settings) -> None:
    """reader.samples > 1 measures the reader's sampling variance: greedy decoding would give N equal answers."""
    samples = settings.reader.samples
    if samples > 1 and not settings.llm.options.temperature > 0:
        raise SettingError(
            f"reader.samples={samples} at llm.temperature={settings.llm.options.temperature}: greedy decoding gives "
            f"{samples} equal answers; set llm.temperature above 0 (e.g. 0.7) to measure the sampling variance"
        )
    if samples > 1 and not settings.knobs.read:
        raise SettingError(f"reader.samples={samples} samples the reader's answers: it needs read=true")


def _check_judge(settings: Settings) -> None:
    """metric=llm_judge grades answers: it needs the reader and the prompt set's judge role, refused now."""
    if settings.knobs.metric != "llm_judge":
        if settings.judge_llm is not None:
            raise SettingError("llm@judge_llm=... chooses the judge of metric=llm_judge: set metric=llm_judge too")
        return
    if not settings.knobs.read:
        raise SettingError("metric=llm_judge grades the reader's answers: it needs read=true")
    if settings.prompts.judge is None:
        raise SettingError(
            f"metric=llm_judge: the prompt set {settings.prompts.name!r} ({settings.prompts.origin}) has no judge "
            "role; add one to the set's file (hipporag/prompts/sets/default.yaml has ours) or use prompts=default"
        )


def _check_prompt_roles(method: Configured, prompts: PromptSet) -> None:
    """The prompt roles the method needs under its options (its registry entry says which) must be in the
    set: refused now, not at the step that would use them."""
    for role in METHODS[method.name].prompt_roles(method.options):
        if getattr(prompts, role, None) is None:
            raise SettingError(
                f"method={method.name}: the prompt set {prompts.name!r} ({prompts.origin}) has no {role} role; "
                "import one (python -m hipporag.prompts import-official) or use prompts=default"
            )


def compose(*overrides: str, hydra: bool = False):
    """The config `python run.py OVERRIDES...` would run, composed from conf/ without running it (for
    scripts, benchmarks and tests; not inside a running Hydra app); with `hydra`, its `hydra` node too."""
    return next(compose_each([list(overrides)], hydra=hydra))


def compose_each(override_lists, hydra: bool = False):
    """`compose` for many override lists under one Hydra initialisation (a generator: the error of a bad
    list surfaces when its turn comes)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from hipporag.core.paths import CONF_DIR
    from hipporag.core.resolvers import register

    register()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        for overrides in override_lists:
            yield hydra_compose("config", overrides=list(overrides), return_hydra_config=hydra)

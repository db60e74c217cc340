"""The one wiring of a run: settings -> LLM, extractor, embedder -> index -> retrieval context -> ranking key ->
rank -> read.

Why: `python run.py` (`harness.experiment`), the continual protocol (`harness.continual`), the Python API (`api.Corpus`)
and the tests all build the same parts from the same settings and hand them to each other in the same order.
Built here, and only here, a part cannot be wired differently in one of them: a ranking keyed by one LLM and
computed with another, a reader that reads other contexts than the ranking's, an embedder whose weights were
never checked.

    pipeline = Pipeline(settings)                   # the parts; models load at their first use
    pipeline.check_weights()                        # every model file the run needs, before any work
    index, report = pipeline.index(passages)        # OpenIE, embeddings, synonymy, graph (cached)
    ranked = pipeline.rank(index, queries)          # the method's rankings, through the ranking cache
    answers = pipeline.read(queries, pipeline.contexts(index, ranked.rankings))   # the reader

Per-call settings (`settings=`): the Python API ranks one corpus with several methods, knobs and LLMs; each
call's settings must keep the index's parts (the caller checks that), and its LLM is built once per LLM config.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from hipporag.cache.fs import set_cache_mode
from hipporag.core.registry import Configured
from hipporag.core.weights import check_weights
from hipporag.eval.scoring import score_method
from hipporag.harness.settings import Settings
from hipporag.index.build import build_index
from hipporag.index.embed import EmbeddingCache, build_embedder
from hipporag.index.openie import build_extractor
from hipporag.llm.backends import build_llm
from hipporag.llm.judge import Verdicts, judge
from hipporag.llm.reader import read, reader_contexts
from hipporag.retrieval.methods import METHODS, RetrievalContext
from hipporag.retrieval.ranking_cache import Ranked, key_values, rank


@dataclass
class Answers:
    """What the reader gave for each question: the passages it was shown, its raw response, the answer parsed
    from it, the request's error (None when it was answered), and the responses themselves (what each cost).
    With `reader.samples` > 1 this is the first sample (`seed`) and `more` holds the others; `verdicts` is the
    judge's grade of each answer (`metric=llm_judge`)."""

    contexts: list[list[str]]
    raw: list[str]
    answers: list[str]
    errors: list[str | None]
    responses: list
    seed: int | None = None
    more: list[Answers] = field(default_factory=list)
    verdicts: Verdicts | None = None

    def samples(self) -> list[Answers]:
        """Every sample, the first one first (one, without sampling)."""
        return [self, *self.more]

    def all_responses(self) -> list:
        """The responses of every sample: what reading cost."""
        return [r for s in self.samples() for r in s.responses]


class Pipeline:
    """The parts of a run built once from its settings, and the steps that use them in order. `embedder=` and
    `llm=` take parts already built (a test's shared model; the same LLM for every step of a protocol),
    `cache_dir=` another cache folder than the settings' `cache_dir`."""

    def __init__(self, settings: Settings, *, cache_dir: Path | str | None = None, embedder=None, llm=None):
        self.settings = settings
        self.cache_dir = Path(cache_dir if cache_dir is not None else settings.knobs.cache_dir).expanduser()
        set_cache_mode(settings.knobs.cache_mode)  # every store opened from here on follows it (cache.fs)
        self._llms: dict[str, object] = {}
        if llm is not None:
            self._llms[self._llm_key(settings)] = llm
        self.llm = self.llm_for(settings)  # models load lazily: a fully cached run never loads one
        self.extractor = build_extractor(settings.extractor, self.llm, settings.prompts)
        self.embedder = embedder if embedder is not None else build_embedder(settings.embedder)
        self.embeddings = EmbeddingCache(self.embedder, self.cache_dir)

    @staticmethod
    def _llm_key(settings: Settings) -> str:
        return f"{settings.llm!r} fail_fast={settings.knobs.fail_on_llm_error}"

    def llm_for(self, settings: Settings | None = None):
        """The LLM of these settings (the pipeline's own by default), built once per LLM config."""
        settings = settings or self.settings
        key = self._llm_key(settings)
        if key not in self._llms:
            self._llms[key] = build_llm(settings.llm, self.cache_dir, fail_fast=settings.knobs.fail_on_llm_error)
        return self._llms[key]

    def check_weights(self, settings: Settings | None = None, methods: list[Configured] | None = None) -> None:
        """Every model file the run needs (the embedder's, and each method's own checkpoints: ColBERTv2; the
        settings' method and baseline unless `methods` says which), before any work: a model neither on disk nor
        reachable is one line, not a traceback half-way."""
        settings = settings or self.settings
        self.embedder.check_weights()
        for method in settings.methods_to_run() if methods is None else methods:
            for source, what in METHODS[method.name].checkpoints(method.options, settings.knobs):
                check_weights(source, what)

    def index(self, passages: list[str], cache_dir: Path | None = None):
        """The shared index of these passages, and how it was built (`index.build.IndexReport`); `cache_dir`:
        another cache folder (an empty one measures a rebuild from scratch)."""
        return build_index(passages, self.extractor, self.embedder, self.settings.knobs, cache_dir or self.cache_dir)

    def memory(self):
        """An empty `index.memory.Memory` with this pipeline's parts: an index that grows and forgets."""
        from hipporag.index.memory import Memory

        return Memory(self.extractor, self.embedder, self.settings.knobs, self.cache_dir)

    def context(self, index, settings: Settings | None = None, cache_dir: Path | None = None) -> RetrievalContext:
        """What a method may use on `index` under these settings (`cache_dir`: where it keeps what it builds)."""
        settings = settings or self.settings
        return RetrievalContext(
            index=index,
            embeddings=self.embeddings,
            knobs=settings.knobs,
            llm=self.llm_for(settings),
            cache_dir=cache_dir or self.cache_dir,
            prompts=settings.prompts,
        )

    def rank(
        self,
        index,
        queries: list,
        method: Configured | None = None,
        settings: Settings | None = None,
        cache_dir: Path | None = None,
    ) -> Ranked:
        """`method`'s rankings of `queries` on `index` (the settings' method by default), through the ranking
        cache, keyed by what these settings give it (`cache_dir`: another folder for the rankings)."""
        settings = settings or self.settings
        method = method or settings.method
        values = key_values(settings.knobs, method, self.llm_for(settings), self.embedder, settings.prompts)
        return rank(method, self.context(index, settings, cache_dir), queries, index, values)

    def contexts(self, index, rankings: list, settings: Settings | None = None) -> list[list[str]]:
        """What the reader is shown per ranking: its top `qa_top_k` passages, or the texts a method chose instead
        (RAPTOR's nodes)."""
        return reader_contexts(rankings, index.passages, (settings or self.settings).knobs.qa_top_k)

    def read(self, queries: list, contexts: list[list[str]], method: str | None = None, settings=None) -> Answers:
        """The reader (the prompt set's `reader` role, the `reader=` options) on each question's contexts (what
        its ranking shows: `contexts`); its requests counted under `reader/<method>`."""
        settings = settings or self.settings
        samples = settings.reader.samples
        seeds = [None] if samples == 1 else [settings.reader.seed + i for i in range(samples)]
        out = []
        for seed in seeds:
            raw, answers, errors, responses = read(
                self.llm_for(settings),
                queries,
                contexts,
                settings.prompts.reader,
                settings.reader,
                stage=f"reader/{method or settings.method.name}",
                seed=seed,
            )
            out.append(Answers(contexts, raw, answers, errors, responses, seed=seed))
        out[0].more = out[1:]
        return out[0]

    def judge_llm(self, settings: Settings | None = None):
        """The LLM that grades answers under `metric=llm_judge`: `llm@judge_llm=...`'s, or the run's own."""
        settings = settings or self.settings
        if settings.judge_llm is None:
            return self.llm_for(settings)
        return self.llm_for(replace(settings, llm=settings.judge_llm))

    def judge(self, queries: list, answers: Answers, method: str | None = None, settings=None) -> Answers:
        """Every sample's answers graded by the judge (the prompt set's `judge` role), its requests counted under
        `judge/<method>`; `answers` with their `verdicts` set."""
        settings = settings or self.settings
        for sample in answers.samples():
            sample.verdicts = judge(
                self.judge_llm(settings),
                [q.question for q in queries],
                [list(q.gold_answers) for q in queries],
                sample.answers,
                settings.prompts.judge,
                settings.knobs.judge_max_new_tokens,
                stage=f"judge/{method or settings.method.name}",
            )
        return answers

    def llms(self) -> list:
        """Every LLM this pipeline built (the run's, and the judge's when it is another): their usage is the run's."""
        return list(self._llms.values())

    def score(self, index, queries: list, rankings: list, answers: Answers | None, method: str | None = None):
        """`eval.scoring.score_method` of a method's rankings (recall@k) and, when it read, its answers (EM/F1):
        (its summary, one record per question)."""
        return score_method(
            method or self.settings.method.name, queries, index, rankings, answers, self.settings.knobs.retrieval_top_k
        )

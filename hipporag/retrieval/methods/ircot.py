"""IRCoT: multi-step retrieval over any registered method (`method=ircot method.base=hipporag2`).

As both official loops (main branch `retrieve_ircot`; legacy `src/ircot_hipporag.py` and
`src/baselines/ircot.py`, which produced the v1 paper's Table 3):
1. step 1 retrieves with the question through the base method;
2. each further step asks the LLM for the next thought (the prompt set's `ircot` role: the question, the
   thoughts so far, the merged top `shown` passages); a thought holding "So the answer is:" ends the chain,
   any other is the next step's query;
3. each step's top `step_top_k` passages are merged, a passage keeping the best score it reached
   (`retrieval.multistep`, under the `merge` rule: `normalised` as the v1 code, `raw` as the main branch).
`max_steps` counts retrievals, as both loops do (`max_steps=1` is the base alone).

Batched across queries: step k of every unfinished query is one batch of LLM requests (concurrent for a
server, under `llm.max_concurrency`), then one base retrieval over all step-k thoughts (for HippoRAG 2,
one batched PPR). The official loops take one query at a time.

A failed next-thought request ends that query's chain where it stood, marked `failure` (never cached: the
run counts it toward `max_llm_error_rate` and does not store the rankings). Over RAPTOR, the passage
ranking is merged and the reader reads passages, not summaries.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from hipporag.core.errors import SettingError
from hipporag.core.paths import group_config
from hipporag.core.registry import Configured, option
from hipporag.core.rules import Rule, choice, integer
from hipporag.data.dataset import Query
from hipporag.prompts.loading import shipped
from hipporag.retrieval.methods.base import Ranking, RetrievalContext
from hipporag.retrieval.methods.registry import METHODS, register_method
from hipporag.retrieval.multistep import MERGE_RULES, MergedRanking, step_scores

log = logging.getLogger(__name__)

STOP_PHRASE = "So the answer is:"  # both official loops end a chain on it
TRACK_K = 10  # each step's merged top passages kept in the record (the recall curve, the chain's new passages)
THOUGHT_RULES = ("response", "first_sentence")


def base_name(v) -> str | None:
    """The method a base names: a registered method, or a `conf/method/` file of one (`hipporag_colbertv2`:
    HippoRAG with the ColBERTv2 linker), so that a preset can sweep bases with their own options."""
    if not isinstance(v, str):
        return None
    if v in METHODS:
        return v
    try:
        name = group_config("method", v).get("name")
    except SettingError:
        return None
    return name if name in METHODS else None


def _is_base(v) -> bool:
    return base_name(v) not in (None, "ircot")


BASE_RULE = Rule(
    "another registered method (dense, bm25, hipporag, hipporag2, raptor, ...) or a conf/method file of one "
    "(hipporag_colbertv2)",
    _is_base,
)
MAPPING_RULE = Rule(
    "a mapping of the base method's options ({} for its YAML file's)",
    lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
)


@dataclass(frozen=True)
class IrcotOptions:
    base: str = option(BASE_RULE)  # the method each step retrieves with
    base_options: dict = option(MAPPING_RULE)  # over conf/method/<base>.yaml (+method.base_options.k1=1.2)
    max_steps: int = option(integer(1))  # retrievals per question, at most (1: the base alone)
    step_top_k: int = option(integer(1))  # passages each step brings into the merge
    shown: int = option(integer(1))  # merged top passages shown in the next-thought prompt
    merge: str = option(choice(*MERGE_RULES))
    thought: str = option(choice(*THOUGHT_RULES))  # the response as it came (official), or its first sentence
    max_new_tokens: int = option(integer(1))  # the next thought's budget

    def __post_init__(self):
        base_method(self)  # a bad base option stops the run at the settings check


def base_config(base: str, base_options: dict) -> dict:
    """The base method's config group: its YAML file, `base_options` on top (the one place they meet)."""
    if "name" in base_options:
        raise SettingError("method.base_options.name: the base is chosen by method.base")
    return {**group_config("method", base), **base_options}


def base_method(options: IrcotOptions) -> Configured:
    """The base method with its options, checked."""
    return METHODS.configure(base_config(options.base, options.base_options), where="method.base_options")


def _base_of(values: dict) -> tuple[str, dict]:
    """For the ranking key: the base and its options, from the IRCoT options in `values`."""
    opts = values.get("method_options") or {}
    config = base_config(opts.get("base", "dense"), opts.get("base_options") or {})
    return config["name"], config


def first_sentence(text: str) -> str:
    """The first sentence of a response (its first line up to the first . ! or ? followed by a space)."""
    line = text.strip().split("\n", 1)[0].strip()
    m = re.match(r"(.+?[.!?])(\s|$)", line)
    return m.group(1) if m else line


@register_method(
    "ircot",
    options=IrcotOptions,
    uses_llm=lambda values: (values.get("method_options") or {}).get("max_steps", 2) > 1,
    base_of=_base_of,
    index_parts=lambda o: METHODS[base_method(o).name].parts_of(base_method(o).options),
    weights=lambda o, knobs: METHODS[base_method(o).name].checkpoints(base_method(o).options, knobs),
    prompt_roles=lambda o: ("ircot",) if o.max_steps > 1 else (),
)
class IrcotRetriever:
    def __init__(self, options: IrcotOptions):
        self.options = options
        self.base_configured = base_method(options)
        self.base = METHODS.build(self.base_configured)

    @property
    def index_cost(self):
        """The base's own index, when it builds one (RAPTOR's tree): IRCoT over it pays for it."""
        return getattr(self.base, "index_cost", None)

    def _thought(self, text: str) -> str:
        return first_sentence(text) if self.options.thought == "first_sentence" else text

    def retrieve(self, ctx: RetrievalContext, queries: list[Query]) -> list[Ranking]:
        o = self.options
        # read only when the chain steps: a ranking's key holds what it read, and one retrieval is the base alone
        prompt = (ctx.prompts or shipped()).ircot if o.max_steps > 1 else None
        if o.max_steps > 1 and (prompt is None or ctx.llm is None):
            raise SettingError("method=ircot with max_steps > 1 needs an LLM and a prompt set with an ircot role")
        passages = ctx.index.passages
        first = self.base.retrieve(ctx, queries)
        merged = [MergedRanking() for _ in queries]
        tops: list[list[list[int]]] = [[] for _ in queries]
        thoughts: list[list[str]] = [[] for _ in queries]
        ends: list[str | None] = [None] * len(queries)
        errors: list[str | None] = [None] * len(queries)
        fallback = [bool(r.diagnostics.get("fallback", False)) for r in first]
        first_scores = [step_scores(r.scores, o.merge) for r in first]
        for i, r in enumerate(first):
            merged[i].add(r.order, first_scores[i], o.step_top_k)
            tops[i].append(merged[i].ranked()[:TRACK_K])
        active = list(range(len(queries)))
        for step in range(2, o.max_steps + 1):
            if not active:
                break
            conversations = [
                prompt.messages(queries[i].question, [passages[j] for j in merged[i].ranked()[: o.shown]], thoughts[i])
                for i in active
            ]
            answers = ctx.llm.generate(conversations, stage="ircot", max_new_tokens=o.max_new_tokens)
            going = []
            for i, g in zip(active, answers):
                if g.error is not None:
                    ends[i], errors[i] = "failure", g.error
                    continue
                thoughts[i].append(self._thought(g.text))
                if STOP_PHRASE in thoughts[i][-1]:
                    ends[i] = "stop_phrase"
                else:
                    going.append(i)
            log.info(
                "IRCoT step %d/%d: %d asked, %d stopped, %d failed, %d retrieve",
                step,
                o.max_steps,
                len(active),
                sum(ends[i] == "stop_phrase" for i in active),
                sum(ends[i] == "failure" for i in active),
                len(going),
            )
            if going:
                step_queries = [
                    Query(id=f"{queries[i].id}#step{step}", question=thoughts[i][-1], gold_answers=[], has_gold=False)
                    for i in going
                ]
                for i, r in zip(going, self.base.retrieve(ctx, step_queries)):
                    merged[i].add(r.order, step_scores(r.scores, o.merge), o.step_top_k)
                    tops[i].append(merged[i].ranked()[:TRACK_K])
                    fallback[i] = fallback[i] or bool(r.diagnostics.get("fallback", False))
            active = going
        out = []
        for i, r in enumerate(first):
            order, scores = merged[i].full_ranking(r.order, first_scores[i])
            diag = {k: v for k, v in r.diagnostics.items() if k != "timing_ms"}
            diag["fallback"] = fallback[i]
            diag["ircot"] = {
                "base": o.base,
                "retrievals": len(tops[i]),
                "merged": len(merged[i].best),  # the passages any step brought in (they lead the order)
                "end": ends[i] or "max_steps",
                "thoughts": thoughts[i],
                "error": errors[i],
                "top": tops[i],
            }
            out.append(Ranking(order=order, scores=scores, diagnostics=diag))
        return out

"""LLM OpenIE in two steps, as HippoRAG does it: named entities first, then triples conditioned on them.

The prompts are the `ner` and `triples` roles of the run's prompt set (`hipporag.prompts`; the shipped
default is ours, one-shot, JSON output); their digests are part of the extractor identity, so another
prompt gives new cache entries instead of mixing outputs. Responses go through
the tolerant parser (`openie.parse`); what cannot be parsed is recorded on the passage with the raw
response and counted, and the batch goes on. A backend failure (after retries) is marked transient:
not cached, so the next run asks again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed

from hipporag.index.openie.extraction import Extraction
from hipporag.index.openie.parse import PARSE_VERSION, ParseResult, parse_entities, parse_triples
from hipporag.llm.generation import Generation
from hipporag.prompts.loading import shipped
from hipporag.prompts.prompt_set import PromptSet


def ner_messages(passage: str, prompts: PromptSet | None = None) -> list[dict]:
    """The NER request for a passage: the prompt set's `ner` role (the shipped default when none is given)."""
    return (prompts or shipped()).ner.render(passage=passage)


def triple_messages(passage: str, entities: list[str], prompts: PromptSet | None = None) -> list[dict]:
    """The triple request for a passage and its entities: the `triples` role, which may take the entities as
    a JSON list (`named_entities`) or as the official JSON object (`named_entity_json`)."""
    return (prompts or shipped()).triples.render(
        passage=passage,
        named_entities=json.dumps(entities),
        named_entity_json=json.dumps({"named_entities": entities}),
    )


def _cost(ner: Generation, triples: Generation | None) -> dict:
    """What one passage's answers cost, per LLM stage (a cached answer counts what it cost when it was asked)."""

    def one(g: Generation) -> dict:
        return {
            "requests": g.attempts,
            "input_tokens": g.input_tokens,
            "output_tokens": g.output_tokens,
            "seconds": round(g.seconds, 4),
            "errors": g.attempts - (g.error is None),
        }

    return {"openie/ner": one(ner), **({"openie/triples": one(triples)} if triples is not None else {})}


RAW_KEPT = 2000  # characters of an unusable answer kept beside its error (the LLM cache keeps all of it)


def assemble(ner: Generation, entities: ParseResult, triples: Generation | None) -> Extraction:
    """One passage's extraction from its two answers (`triples` is None when NER failed and it was not asked)."""
    errors = [f"ner: {ner.error}"] if ner.error else ([f"ner: {entities.error}"] if entities.error else [])
    raws = {"ner": ner.text[:RAW_KEPT]}  # the whole answer is in the LLM cache: this is for the error report
    transient = ner.error is not None
    parsed = ParseResult()
    if triples is not None:
        parsed = parse_triples(triples.text)
        if triples.error:
            errors.append(f"triples: {triples.error}")
            transient = True
        elif parsed.error:
            errors.append(f"triples: {parsed.error}")
        elif not parsed.items and parsed.dropped:
            errors.append(f"triples: all {parsed.dropped} items malformed")
        raws["triples"] = triples.text[:RAW_KEPT]
    else:
        errors.append("triples: not asked, the NER request failed")
    return Extraction(
        entities=entities.items,
        triples=parsed.items,
        error="; ".join(errors) or None,
        raw=json.dumps(raws) if errors or parsed.dropped else None,
        transient=transient,
        cost=_cost(ner, triples),
    )


class LLMExtractor:
    """NER then triples per passage. With a backend that takes concurrent requests (an OpenAI-compatible
    server) the passages are pipelined (`stream`): each passage's triple request follows its own NER
    answer at once, up to `llm.max_concurrency` requests in flight in all, no barrier between passages.
    Other backends (transformers, vLLM in-process) get whole batches (`extract`): all NER answers of a
    batch, then all its triple answers, which is how those engines are fastest."""

    def __init__(self, llm, max_new_tokens: int = 512, batch_size: int = 64, prompts: PromptSet | None = None):
        self.llm = llm
        self.prompts = prompts or shipped()
        self.batch_size = batch_size  # passages committed to the cache together (batch backends)
        self.max_new_tokens = max_new_tokens
        self.identity = {
            "name": "llm",
            "llm": llm.identity,
            "prompts": {"ner": self.prompts.ner.digest, "triples": self.prompts.triples.digest},
            "parse_version": PARSE_VERSION,  # 2: the one official triple rule (openie.validity)
            "max_new_tokens": max_new_tokens,
            "temperature": 0.0,
        }
        self._started = 0.0

    @property
    def decoding(self) -> dict:
        return {"max_new_tokens": self.max_new_tokens, "temperature": 0.0}

    @property
    def streams(self) -> bool:
        return bool(getattr(self.llm, "concurrent", False))

    # -- batch backends
    def extract(self, passages: list[str]) -> list[Extraction]:
        ner = self.llm.generate([ner_messages(p, self.prompts) for p in passages], stage="openie/ner", **self.decoding)
        entities = [parse_entities(g.text) for g in ner]
        asked = [i for i, g in enumerate(ner) if g.error is None]
        answers = self.llm.generate(
            [triple_messages(passages[i], entities[i].items, self.prompts) for i in asked],
            stage="openie/triples",
            **self.decoding,
        )
        triples: dict[int, Generation] = dict(zip(asked, answers))
        return [assemble(g, e, triples.get(i)) for i, (g, e) in enumerate(zip(ner, entities))]

    # -- concurrent backends
    def stream(self, passages: list[str]) -> Iterator[tuple[int, Extraction]]:
        """(position, extraction) of each passage as soon as both its answers are in, in completion order.

        Answers already in the LLM cache are looked up together first (a resumed run sends only the
        requests that never completed); every new answer is committed to the cache as it arrives."""
        self._started = time.perf_counter()
        ner_cached = self.llm.cached_many(
            [ner_messages(p, self.prompts) for p in passages], "openie/ner", **self.decoding
        )
        entities = {i: parse_entities(g.text) for i, g in enumerate(ner_cached) if g is not None}
        known = list(entities)
        tri = self.llm.cached_many(
            [triple_messages(passages[i], entities[i].items, self.prompts) for i in known],
            "openie/triples",
            **self.decoding,
        )
        tri_cached = {i: g for i, g in zip(known, tri) if g is not None}

        def chain(i: int) -> Extraction:
            ner = ner_cached[i]
            if ner is None:
                ner = self.llm.generate_one(
                    ner_messages(passages[i], self.prompts), "openie/ner", lookup=False, **self.decoding
                )
            ents = entities.get(i) or parse_entities(ner.text)
            triples = tri_cached.get(i)
            if triples is None and ner.error is None:
                triples = self.llm.generate_one(
                    triple_messages(passages[i], ents.items, self.prompts),
                    "openie/triples",
                    lookup=i not in entities,
                    **self.decoding,
                )
            return assemble(ner, ents, triples)

        todo = []
        for i in range(len(passages)):  # both answers cached: no thread needed
            if i in tri_cached:
                yield i, chain(i)
            else:
                todo.append(i)
        if not todo:
            return
        self.llm.ensure_ready()
        pool = ThreadPoolExecutor(max_workers=min(self.llm.max_concurrency, len(todo)), thread_name_prefix="openie")
        try:
            futures = {pool.submit(chain, i): i for i in todo}
            for f in as_completed(futures):
                yield futures[f], f.result()
        finally:
            pool.shutdown(wait=True, cancel_futures=True)  # on a failure: requests in flight finish, no new ones
            self.llm.flush()
            self._share_wall_time()

    def sync(self) -> None:
        """Wait until the answers received so far are committed to the LLM cache."""
        self.llm.sync()

    def rates(self) -> dict:
        """Requests and tokens per second of this stream so far, for the progress bar."""
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        stages = [self.llm.usage[s] for s in ("openie/ner", "openie/triples") if s in self.llm.usage]
        sent = sum(u.calls - u.cache_hits for u in stages)
        tokens = sum(u.input_tokens + u.output_tokens for u in stages)
        return {"req/s": f"{sent / elapsed:.1f}", "tok/s": f"{tokens / elapsed:.0f}"}

    def _share_wall_time(self) -> None:
        """The stream's wall time, split between its two stages by their requests' own time."""
        wall = time.perf_counter() - self._started
        stages = [self.llm.usage[s] for s in ("openie/ner", "openie/triples") if s in self.llm.usage]
        total = sum(u.request_seconds for u in stages)
        for u in stages:
            u.seconds += wall * (u.request_seconds / total if total else 1 / len(stages))

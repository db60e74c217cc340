"""An index that grows and forgets: passages inserted and deleted in batches, each step paying for what changed.

Why: HippoRAG 2 presents itself as continual memory, and a benchmark of it must say whether an index grown
step by step is the index a one-shot build of the same passages gives, and what each step costs. The official
code does not keep that promise (reproduce/FIDELITY.md, "Insert and delete"): this module does, and
`tests/test_memory.py` checks it against `build_index` on random batch orders and deletions.

What a step does:
- insert: OpenIE (`run_openie`, cached per passage) of the new passages only; embeddings of the new passages,
  of the entities and facts no present passage had, and nothing else (`EmbeddingCache`); fact pair counts and
  passage edges of the new passages added; the synonymy store compares only entities it never saw with the
  others (`SynonymyStore.update`), and the per-entity synonym choice (`synonymy.kept_synonyms`) is redone only
  for the new entities and the present ones whose neighbour list names an entity that came or went.
- delete: a passage's node and edges go, its contribution to each fact pair count is taken back, and a fact or
  entity goes with the last passage that held it, its edges and vectors with it; synonym choices that named a
  removed entity are redone (a neighbour cut at the top-k or the 101 cap may come back).
- `memory_graph=official` keeps, beside that state, the graph the official code grows instead (FIDELITY.md,
  "Insert and delete"): each insert appends the new passages' fact and passage edges and every synonymy pair of
  the entities present, again; a delete drops only the edges of the nodes it removes. Its index key carries the
  step history, which that graph depends on.
- `index()` lays the state out as the one-shot build does (entities sorted, passages in the order they
  arrived, facts sorted; `graph.assemble_graph`), so that it equals `build_index` on the present passages in
  that order and every method reads it unchanged. That layout is the one whole-size pass of a step: ordering
  the node ids and handing the edge list to igraph (the cost of the `graph` part in each step's report).

A step prepares everything that can fail (OpenIE, embedding, the synonymy store) before it changes the state:
a failed step (an LLM error, a bad id) leaves the index as it was, and its finished OpenIE and embeddings stay
in the caches for the retry. Applying the prepared changes is dictionary work, journalled: an interrupt
(Ctrl-C, SIGTERM) inside it is rolled back before it propagates.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from hipporag.cache.keys import stable_key
from hipporag.core.errors import DatasetError, LLMFailureError
from hipporag.core.knobs import Knobs
from hipporag.core.meter import Spend, measure
from hipporag.core.textnorm import passage_id
from hipporag.index.build import EMBEDDED_PARTS, Index, index_identity
from hipporag.index.embed import EmbeddingCache
from hipporag.index.graph import GraphStats, assemble_graph, graph_of, prepare_graph_inputs
from hipporag.index.openie import run_openie
from hipporag.index.openie.validity import valid_triples
from hipporag.index.synonymy import SynonymyStore, kept_synonyms

log = logging.getLogger(__name__)

_MISSING = object()


@dataclass
class StepReport:
    """What one insert or delete did and cost. `spend` per part: openie, passage_vectors, entity_vectors,
    fact_vectors, synonymy, graph (the layout of the index)."""

    op: str
    asked: int = 0
    inserted: int = 0
    deleted: int = 0
    skipped_duplicates: int = 0  # passages already present, or given twice in the batch
    openie_unusable: int = 0  # inserted passages whose extraction gave nothing usable (cached; no triples)
    passages: int = 0  # present after the step
    entities_added: int = 0
    entities_removed: int = 0
    facts_added: int = 0
    facts_removed: int = 0
    synonym_lists_redone: int = 0
    spend: dict[str, Spend] = field(default_factory=dict)
    wall_s: float = 0.0

    def total(self) -> Spend:
        """Every part's spend summed (peak memory: the highest)."""
        return sum(self.spend.values(), Spend())


class _Journal:
    """Undo records for the apply phase: every change to a state dictionary, reversed on an interrupt."""

    def __init__(self):
        self.undo: list[tuple[dict, object, object]] = []

    def set(self, d: dict, key, value) -> None:
        self.undo.append((d, key, d.get(key, _MISSING)))
        d[key] = value

    def pop(self, d: dict, key) -> None:
        self.undo.append((d, key, d.pop(key)))

    def roll_back(self) -> None:
        for d, key, old in reversed(self.undo):
            if old is _MISSING:
                d.pop(key, None)
            else:
                d[key] = old


class Memory:
    """The index of a changing set of passages (`insert`, `delete`), equal after every step to the one-shot
    `build_index` of the passages present, in the order they arrived. Passages are named by the official
    passage id (`chunk-<md5 of the text>`), as the graph names their nodes."""

    def __init__(self, extractor, embedder, knobs: Knobs, cache_dir: Path):
        self.extractor, self.embedder, self.knobs = extractor, embedder, knobs
        self.cache_dir = Path(cache_dir)
        self.embeddings = EmbeddingCache(embedder, self.cache_dir)
        self._llm = getattr(extractor, "llm", None)
        self.texts: dict[str, str] = {}  # passage id -> text, in the order passages arrived
        self.triples: dict[str, list[tuple[str, str, str]]] = {}  # passage id -> its normalised triples
        self.entities_of: dict[str, list[str]] = {}  # passage id -> its entities, first mention first
        self.entity_support: dict[str, int] = {}  # entity -> passages that hold it
        self.fact_support: dict[tuple[str, str, str], int] = {}  # fact -> passages that hold it
        self.fact_pairs: dict[tuple[str, str], float] = {}  # (entity, entity) -> triples joining them, both ways
        self.vectors: dict[str, dict] = {part: {} for part in EMBEDDED_PARTS}  # what -> key -> vector
        # synonymy: each present entity's stored neighbour list (over every entity the store has seen), who lists
        # whom, and the neighbours the official rule keeps for it among the present entities
        self.neighbours: dict[str, list[tuple[str, float]]] = {}
        self.listed_by: dict[str, set[str]] = {}
        self.synonyms: dict[str, list[tuple[str, float]]] = {}
        self._universe: dict[str, np.ndarray] = {}  # entity vectors the synonymy store asked for, kept
        # memory_graph=official: per insert (by step number), the edges it added, (kind, end, end, weight) with
        # ends ("e", entity) / ("p", passage id); and the steps so far, (op, ids), which that graph depends on
        self.official_edges: dict[int, list[tuple]] = {}
        self.history: list[tuple[str, tuple[str, ...]]] = []
        self._index: Index | None = None
        self.steps: list[StepReport] = []

    # ------------------------------------------------------------------------------------------------ reading
    @property
    def ids(self) -> list[str]:
        return list(self.texts)

    @property
    def passages(self) -> list[str]:
        return list(self.texts.values())

    def __len__(self) -> int:
        return len(self.texts)

    def index(self) -> Index:
        """The index of the present passages, laid out as `build_index` lays it out (kept until the next step)."""
        if self._index is None:
            with measure(None, None) as spend:
                self._index = self._layout()
            if self.steps:
                self.steps[-1].spend["graph"] = self.steps[-1].spend.get("graph", Spend()) + spend
        return self._index

    # ------------------------------------------------------------------------------------------------ insert
    def insert(self, passages: Sequence[str]) -> StepReport:
        """Add passages (texts, "Title\\ntext" as a dataset's are joined). One already present, or given twice,
        is skipped and counted (`skipped_duplicates`); an empty batch is a step that does nothing. If OpenIE
        fails for any passage (LLM errors) nothing is inserted: one line says how many, and the passages that
        did extract are cached for the retry."""
        t0 = time.perf_counter()
        texts = _checked_texts(passages)
        report = StepReport(op="insert", asked=len(texts))
        new: dict[str, str] = {}
        for text in texts:
            pid = passage_id(text)
            if pid in self.texts or pid in new:
                report.skipped_duplicates += 1
            else:
                new[pid] = text
        if report.skipped_duplicates:
            log.warning("insert: %d passage(s) already present or given twice: skipped", report.skipped_duplicates)
        with measure(self._llm, None) as report.spend["openie"]:
            extractions, stats = run_openie(list(new.values()), self.extractor, self.cache_dir) if new else ([], None)
        if stats is not None and stats.failed_requests:
            raise LLMFailureError(
                f"insert: OpenIE failed for {stats.failed_requests} of {len(new)} passages (LLM errors); nothing "
                "was inserted and the index is as it was",
                hint="the passages that did extract are cached: insert the batch again once the LLM answers",
            )
        report.openie_unusable = stats.unusable if stats is not None else 0
        triples, entities_of = {}, {}
        for pid, extraction in zip(new, extractions):
            inputs = prepare_graph_inputs([valid_triples(extraction.triples)])
            triples[pid], entities_of[pid] = inputs.chunk_triples[0], inputs.chunk_entities[0]
        added_entities = list(
            dict.fromkeys(e for ents in entities_of.values() for e in ents if e not in self.entity_support)
        )
        added_facts = list(dict.fromkeys(t for ts in triples.values() for t in ts if t not in self.fact_support))
        fresh = self._embed(
            {"passages": list(new.values()), "entities": added_entities, "facts": [str(f) for f in added_facts]}, report
        )
        present = set(self.entity_support) | set(added_entities)
        lists = self._synonymy_reads(added_entities, [], present, report)

        journal = _Journal()
        try:
            for pid, text in new.items():
                journal.set(self.texts, pid, text)
                journal.set(self.triples, pid, triples[pid])
                journal.set(self.entities_of, pid, entities_of[pid])
                journal.set(self.vectors["passages"], pid, fresh["passages"][text])
                for e in entities_of[pid]:
                    journal.set(self.entity_support, e, self.entity_support.get(e, 0) + 1)
                for f in set(triples[pid]):
                    journal.set(self.fact_support, f, self.fact_support.get(f, 0) + 1)
                for s, _, o in triples[pid]:
                    journal.set(self.fact_pairs, (s, o), self.fact_pairs.get((s, o), 0.0) + 1.0)
                    journal.set(self.fact_pairs, (o, s), self.fact_pairs.get((o, s), 0.0) + 1.0)
            for e in added_entities:
                journal.set(self.vectors["entities"], e, fresh["entities"][e])
            for f in added_facts:
                journal.set(self.vectors["facts"], f, fresh["facts"][str(f)])
            self._apply_synonymy(lists, [], journal)
            if self.knobs.memory_graph == "official" and new:
                journal.set(self.official_edges, len(self.steps), self._official_insert_edges(list(new)))
        except BaseException:
            journal.roll_back()
            raise
        self.history.append(("insert", tuple(new)))
        report.inserted, report.entities_added, report.facts_added = len(new), len(added_entities), len(added_facts)
        return self._finish(report, t0)

    # ------------------------------------------------------------------------------------------------ delete
    def delete(self, ids: Iterable[str]) -> StepReport:
        """Remove passages by id (`ids`, the ids `insert` gave them); an id not present stops the step in one line
        naming it, before anything changes. A fact or entity no remaining passage holds goes with its edges."""
        t0 = time.perf_counter()
        asked = list(dict.fromkeys(ids))
        unknown = [i for i in asked if i not in self.texts]
        if unknown:
            raise DatasetError(
                f"delete: {len(unknown)} of {len(asked)} ids are not in the index, e.g. {unknown[0]!r}; nothing was deleted",
                hint="ids are the official passage ids (chunk-<md5>) that Memory.ids lists",
            )
        report = StepReport(op="delete", asked=len(asked), spend={"openie": Spend()})
        entity_loss: dict[str, int] = {}
        fact_loss: dict[tuple, int] = {}
        for pid in asked:
            for e in self.entities_of[pid]:
                entity_loss[e] = entity_loss.get(e, 0) + 1
            for f in set(self.triples[pid]):
                fact_loss[f] = fact_loss.get(f, 0) + 1
        removed_entities = [e for e, n in entity_loss.items() if self.entity_support[e] == n]
        removed_facts = [f for f, n in fact_loss.items() if self.fact_support[f] == n]
        present = set(self.entity_support) - set(removed_entities)
        for part in EMBEDDED_PARTS.values():
            report.spend[part] = Spend()
        lists = self._synonymy_reads([], removed_entities, present, report)

        journal = _Journal()
        order = list(self.texts)
        try:
            for pid in asked:
                for e in self.entities_of[pid]:
                    if self.entity_support[e] == 1:
                        journal.pop(self.entity_support, e)
                    else:
                        journal.set(self.entity_support, e, self.entity_support[e] - 1)
                for f in set(self.triples[pid]):
                    if self.fact_support[f] == 1:
                        journal.pop(self.fact_support, f)
                    else:
                        journal.set(self.fact_support, f, self.fact_support[f] - 1)
                for s, _, o in self.triples[pid]:
                    for pair in ((s, o), (o, s)):
                        if self.fact_pairs[pair] == 1.0:
                            journal.pop(self.fact_pairs, pair)
                        else:
                            journal.set(self.fact_pairs, pair, self.fact_pairs[pair] - 1.0)
                for d in (self.texts, self.triples, self.entities_of, self.vectors["passages"]):
                    journal.pop(d, pid)
            for e in removed_entities:
                journal.pop(self.vectors["entities"], e)
            for f in removed_facts:
                journal.pop(self.vectors["facts"], f)
            self._apply_synonymy(lists, removed_entities, journal)
            if self.knobs.memory_graph == "official":
                gone = {("p", pid) for pid in asked} | {("e", e) for e in removed_entities}
                for step, edges in list(self.official_edges.items()):
                    kept = [x for x in edges if x[1] not in gone and x[2] not in gone]
                    if len(kept) != len(edges):
                        journal.set(self.official_edges, step, kept)
        except BaseException:
            journal.roll_back()
            self.texts = {pid: self.texts[pid] for pid in order}  # popped ids came back at the end: the old order
            raise
        self.history.append(("delete", tuple(asked)))
        report.deleted, report.entities_removed, report.facts_removed = (
            len(asked),
            len(removed_entities),
            len(removed_facts),
        )
        return self._finish(report, t0)

    # -------------------------------------------------------------------------------------------- the stages
    def _embed(self, texts: dict[str, list[str]], report: StepReport) -> dict[str, dict[str, np.ndarray]]:
        out = {}
        for what, items in texts.items():
            with measure(None, self.embeddings) as report.spend[EMBEDDED_PARTS[what]]:
                vecs = self.embeddings.embed(items, what=what) if items else np.zeros((0, 0), dtype=np.float32)
            out[what] = dict(zip(items, vecs))
        return out

    def _universe_vectors(self, texts: list[str]) -> np.ndarray:
        """Entity vectors for the synonymy store, from memory where this process has them (the store asks
        for every entity it has seen at each update; reading them all from the cache each step would be a
        whole-size pass)."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._universe]
        if missing:
            self._universe.update(zip(missing, self.embeddings.embed(missing, what="entities")))
        return np.stack([self._universe[t] for t in texts])

    def _synonymy_reads(
        self, added: list[str], removed: list[str], present: set[str], report: StepReport
    ) -> dict[str, list[tuple[str, float]]]:
        """The fresh neighbour lists of every entity whose synonym choice may change: the added ones, and the
        present ones whose list names an added or removed entity (by the lists this memory holds, and by the
        changed entities' own lists: the store's lists are symmetric for entities it met in different updates)."""
        if not self.knobs.synonymy_edges:
            report.spend["synonymy"] = Spend()
            return {}
        with measure(None, self.embeddings) as report.spend["synonymy"]:
            store = SynonymyStore(
                self.cache_dir, self.embedder.identity, self.knobs.synonymy_threshold, self.knobs.synonymy_knn
            )
            try:
                changed = [*added, *removed]
                if added:
                    store.update(added, self._universe_vectors)
                own = store.lists_by_text(changed) if changed else {}
                missing = [e for e in added if e not in own]
                if missing:  # a list dropped as damaged since: the store computes it again
                    store.update(missing, self._universe_vectors)
                    own.update(store.lists_by_text(missing))
                affected = set(added)
                for e in changed:
                    affected |= self.listed_by.get(e, set())
                    affected |= {t for t, _ in own.get(e, []) if t in present}
                affected &= present
                read = store.lists_by_text(sorted(affected - set(own)))  # the added ones' lists are in `own`
                lists = {e: own[e] if e in own else read[e] for e in sorted(affected) if e in own or e in read}
                lost = affected - set(lists)
                if lost:
                    store.update(sorted(lost), self._universe_vectors)
                    lists.update(store.lists_by_text(sorted(lost)))
            finally:
                store.close()
        report.synonym_lists_redone = len(lists)
        return lists

    def _apply_synonymy(self, lists: dict[str, list[tuple[str, float]]], removed: list[str], journal: _Journal) -> None:
        if not self.knobs.synonymy_edges:
            return
        for e in removed:
            self._drop_listing(e, journal)
            journal.pop(self.neighbours, e)
            journal.pop(self.synonyms, e)
        present = self.entity_support
        topk = self.knobs.synonymy_topk
        for e, nbrs in lists.items():
            if e in self.neighbours:
                self._drop_listing(e, journal)
            journal.set(self.neighbours, e, nbrs)
            for t, _ in nbrs:
                listers = self.listed_by.get(t)
                if listers is None:
                    journal.set(self.listed_by, t, {e})
                else:
                    journal.set(self.listed_by, t, listers | {e})
            journal.set(self.synonyms, e, kept_synonyms(e, [(t, s) for t, s in nbrs if t in present], topk))

    def _drop_listing(self, e: str, journal: _Journal) -> None:
        for t, _ in self.neighbours.get(e, []):
            listers = self.listed_by.get(t)
            if listers is not None and e in listers:
                rest = listers - {e}
                if rest:
                    journal.set(self.listed_by, t, rest)
                else:
                    journal.pop(self.listed_by, t)

    def _finish(self, report: StepReport, t0: float) -> StepReport:
        self._index = None
        report.passages = len(self.texts)
        report.wall_s = time.perf_counter() - t0
        self.steps.append(report)
        log.info(
            "%s: %d asked, %d %s, %d skipped; %d passages now (+%d/-%d entities, +%d/-%d facts, %d synonym lists redone)",
            report.op,
            report.asked,
            report.inserted or report.deleted,
            "inserted" if report.op == "insert" else "deleted",
            report.skipped_duplicates,
            report.passages,
            report.entities_added,
            report.entities_removed,
            report.facts_added,
            report.facts_removed,
            report.synonym_lists_redone,
        )
        return report

    def _official_insert_edges(self, new: list[str]) -> list[tuple]:
        """The edges one official `index()` call adds: the new passages' fact pair counts (both directions) and
        passage edges, then every synonymy pair of the entities present, its cosine replacing a fact count of
        the same direction; self-loops left out (its `add_new_edges`)."""
        weights: dict[tuple, float] = {}
        kinds: dict[tuple, str] = {}
        for pid in new:
            for s, _, o in self.triples[pid]:
                for pair in ((("e", s), ("e", o)), (("e", o), ("e", s))):
                    weights[pair], kinds[pair] = weights.get(pair, 0.0) + 1.0, "fact"
        for pid in new:
            for e in self.entities_of[pid]:
                weights[("p", pid), ("e", e)], kinds[("p", pid), ("e", e)] = 1.0, "passage"
        for e in sorted(self.entity_support):
            for t, score in self.synonyms.get(e, []):
                weights[("e", e), ("e", t)], kinds[("e", e), ("e", t)] = score, "synonymy"
        return [(kinds[(a, b)], a, b, w) for (a, b), w in weights.items() if a != b]

    def _official_graph(self, entities: list[str], ids: list[str], passages: list[str], n_facts: int):
        """memory_graph=official: the edges every insert added and no delete removed, as parallel edges."""
        node = {("e", e): i for i, e in enumerate(entities)}
        node.update({("p", pid): len(entities) + p for p, pid in enumerate(ids)})
        edges, weights, pairs = [], [], {"fact": set(), "passage": set(), "synonymy": set()}
        for step in sorted(self.official_edges):
            for kind, a, b, w in self.official_edges[step]:
                edges.append((node[a], node[b]))
                weights.append(w)
                pairs[kind].add((a, b))
        graph = graph_of(entities, passages, edges, weights, self.knobs.directed)
        distinct = len(pairs["fact"] | pairs["passage"] | pairs["synonymy"])
        stats = GraphStats(
            entity_nodes=len(entities),
            passage_nodes=len(passages),
            edges=graph.ecount(),
            fact_triples=n_facts,
            fact_pairs=len(pairs["fact"]),
            passage_pairs=len(pairs["passage"]),
            synonymy_pairs=len(pairs["synonymy"]),
            official_synonymy_triples=distinct - n_facts - len(pairs["passage"]),
        )
        return graph, stats

    def _layout(self) -> Index:
        entities = sorted(self.entity_support)
        at = {e: i for i, e in enumerate(entities)}
        ids, passages = list(self.texts), list(self.texts.values())
        facts = sorted(self.fact_support)
        fact_weights = {(at[a], at[b]): w for (a, b), w in self.fact_pairs.items()}
        passage_entities = [[at[e] for e in self.entities_of[pid]] for pid in ids]
        synonymy = None
        if self.knobs.synonymy_edges and entities:
            synonymy = {(i, at[t]): s for i, e in enumerate(entities) for t, s in self.synonyms.get(e, [])}
        if self.knobs.memory_graph == "official":
            graph, stats = self._official_graph(entities, ids, passages, len(facts))
        else:
            graph, stats = assemble_graph(
                entities, passages, len(facts), fact_weights, passage_entities, synonymy, self.knobs.directed
            )
        identity = index_identity(passages, self.extractor, self.embedder, self.knobs)
        if self.knobs.memory_graph == "official":  # that graph depends on the steps, not only on what is present
            identity["memory_graph"] = {"graph": "official", "history": stable_key(self.history)}
        return Index(
            key=stable_key(identity),
            passages=passages,
            entities=entities,
            facts=facts,
            graph=graph,
            passage_vecs=_stack([self.vectors["passages"][pid] for pid in ids]),
            entity_vecs=_stack([self.vectors["entities"][e] for e in entities]),
            fact_vecs=_stack([self.vectors["facts"][f] for f in facts]),
            entity_passage_count=np.array([self.entity_support[e] for e in entities], dtype=np.float64),
            stats=asdict(stats),
        )


def _stack(rows: list[np.ndarray]) -> np.ndarray:
    return np.stack(rows) if rows else np.zeros((0, 0), dtype=np.float32)


def _checked_texts(passages) -> list[str]:
    if isinstance(passages, str) or not isinstance(passages, Sequence):
        raise DatasetError("insert: passages must be a list of texts, not " + type(passages).__name__)
    for i, p in enumerate(passages):
        if not isinstance(p, str):
            raise DatasetError(f"insert: passage {i} is {type(p).__name__}, not text")
        if not p.strip():
            raise DatasetError(f"insert: passage {i} is blank")
    return list(passages)

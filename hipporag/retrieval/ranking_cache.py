"""Cached rankings, in one place: what a ranking's key holds, the key, and whether to load, compute or store.

A method's ranking of a query set is keyed by (index key, method, the values of the knobs it declares, the
questions), so a damping sweep ranks the dense baseline once; the reader's answers for identical contexts
come from the LLM cache. The declared list is checked against the code as it runs: the method gets a
context that records each knob, role and model it reads (`retrieval.reads`), and a ranking that read
anything its key does not hold is used for this run but never stored, with one warning naming what it
read (`tests/test_method_contract.py` refuses such a method by name). Each file carries a checksum of its
arrays: a damaged file is deleted and recomputed, never used.
"""

from __future__ import annotations

import io
import json
import logging
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hipporag.cache.files import atomic_write_bytes
from hipporag.cache.keys import bytes_digest, file_digest, stable_key
from hipporag.core import failpoints
from hipporag.core.meter import Spend, measure
from hipporag.core.registry import Configured
from hipporag.prompts.loading import shipped
from hipporag.retrieval.methods import METHODS, get_method
from hipporag.retrieval.methods.base import Ranking, RankingContractError, RetrievalContext, ranking_violations
from hipporag.retrieval.methods.registry import LLM_KNOBS
from hipporag.retrieval.reads import recording_context, role_read

log = logging.getLogger(__name__)

# Knobs that decide only what happens when an LLM request fails. A ranking computed under a failure is never
# stored, so a stored ranking cannot depend on them: reading them needs no place in the key.
FAILURE_POLICY_KNOBS = frozenset({"fail_on_llm_error", "max_llm_error_rate"})


def key_values(knobs, method: Configured, llm, embedder, prompts=None) -> dict:
    """What a ranking key may hold, by name: every knob (`filter_prompt` with its file's digest, so an
    edited file is another key), the method's options (its config group), the LLM with its decoding, each
    prompt-set role's digest (`<role>_messages`), the embedder's query instructions. A method's
    `cache_knobs` pick from it (`relevant_knobs`)."""
    prompts = prompts or shipped()
    values = knobs.values()
    if values.get("filter_prompt"):
        values["filter_prompt"] = {"path": values["filter_prompt"], "sha256": file_digest(values["filter_prompt"])}
    return {
        **values,
        **{role_read(role): digest for role, digest in prompts.role_digests().items()},
        "method_options": method.as_dict(),
        "llm": llm_key(llm),
        "query_instructions": embedder.query_instructions(),
    }


def _own_names(spec, values: dict) -> list[str]:
    """A method's own key names under these values: its `cache_knobs`, less the LLM's while it does not use the
    LLM (it shapes a ranking only through the filter, query NER, RAPTOR, IRCoT), less those its `key_when`
    rules say these settings do not read."""
    return [
        k
        for k in spec.cache_knobs
        if (spec.uses_llm(values) or k not in LLM_KNOBS) and (k not in spec.key_when or spec.key_when[k](values))
    ]


def _base(spec, values: dict) -> tuple[str, dict] | None:
    """A wrapping method's base, and the key values it sees (its own options as `method_options`)."""
    if spec.base_of is None:
        return None
    base, base_options = spec.base_of(values)
    return base, {**values, "method_options": base_options}


def key_names(method: str, values: dict) -> set[str]:
    """The names a method's ranking key holds under these values (its base's too, for a wrapping method).
    What the method reads must be among them."""
    spec = METHODS.entry(method)
    names = set(_own_names(spec, values))
    base = _base(spec, values)
    return names | key_names(*base) if base else names


def relevant_knobs(method: str, values: dict) -> dict | None:
    """The key values a method's ranking depends on (None: an unknown method); a wrapping method's base
    contributes its own, nested under `base`."""
    spec = METHODS.get(method)
    if spec is None:
        return None
    relevant = {k: values.get(k) for k in _own_names(spec, values)}
    if not relevant.get("query_instructions"):
        relevant.pop("query_instructions", None)  # plain models (MiniLM): keys as before instructions counted
    base = _base(spec, values)
    if base:
        relevant["base"] = {"method": base[0], "knobs": relevant_knobs(*base)}
    return relevant


def ranking_key(index_key: str, method: str, values: dict, questions: list[str]) -> str | None:
    """The content address of a method's ranking: the index, the method, the values (`values`: by name, as
    `key_values` gathers them) of the knobs its registry entry declares (`cache_knobs`), the questions. LLM
    knobs count only while the method uses the LLM."""
    relevant = relevant_knobs(method, values)
    if relevant is None:
        return None  # unknown method: never cached
    return stable_key({"index": index_key, "method": method, "knobs": relevant, "questions": questions}, length=24)


def unkeyed_reads(method: str, values: dict, reads: set[str]) -> set[str]:
    """What a method read that its ranking key does not hold (empty instructions count as held: an embedder
    without any leaves them out of the key, and every key with them differs from every key without)."""
    return set(reads) - key_names(method, values) - FAILURE_POLICY_KNOBS


@dataclass
class Ranked:
    """A method's rankings and how the cache served them: `cache` is `loaded`, `stored`, or `not stored: <why>`;
    `reads` is what the method read (None when loaded).

    For the cost ledger: `spend` is what this run spent ranking (loading included), `made` what computing the
    ranking cost when it was computed (`{"spend": ..., "own_index": ...}`: kept with a cached ranking; None for
    one cached by a version that did not keep it), `own_index` the index the method built for itself this run
    (`OwnIndexCost.as_dict()`; None when it has none or the ranking was loaded), `index_reads` the parts of the
    shared index it read (None when loaded)."""

    rankings: list[Ranking]
    cache: str
    key: str | None
    reads: list[str] | None
    spend: Spend = field(default_factory=Spend)
    made: dict | None = None
    own_index: dict | None = None
    index_reads: list[str] | None = None


def rank(method: Configured, ctx: RetrievalContext, queries, index, values: dict) -> Ranked:
    """The method's rankings of `queries`: loaded when its key has them, else computed on a recording context,
    checked against the `Ranking` contract, and stored unless the key could be wrong for them (an LLM request
    failed meanwhile, the graph is this run's only, or the method read something outside its key)."""
    name = method.name
    key = ranking_key(index.key, name, values, [q.question for q in queries]) if ctx.cache_dir is not None else None
    why_not = None
    if key and not index.complete:
        log.warning(
            "Rankings (%s): computed on this run's incomplete graph, neither loaded from nor stored in the cache",
            name,
        )
        key, why_not = None, "this run's incomplete graph"
    if key:
        with measure(ctx.llm, ctx.embeddings) as spend:
            loaded, made = load_ranked(ctx.cache_dir, key)
        if loaded is not None:
            log.info("Rankings (%s): loaded from cache", name)
            return Ranked(loaded, "loaded", key, None, spend=spend, made=made)
    reads: set[str] = set()
    index_reads: set[str] = set()
    failed_before = ctx.llm.failed_requests() if ctx.llm is not None else 0
    instance = get_method(name, method)
    with measure(ctx.llm, ctx.embeddings) as spend:
        rankings = instance.retrieve(recording_context(ctx, reads, index_reads), queries)
    own = getattr(instance, "index_cost", None)
    own_index = own.as_dict() if own is not None else None
    made = {"spend": (spend - own.this_run if own is not None else spend).as_dict(), "own_index": own_index}
    problems = ranking_violations(rankings, len(index.passages), len(queries))
    if problems:
        raise RankingContractError(f"method {name} broke the Ranking contract: {'; '.join(problems[:3])}")
    failed = (ctx.llm.failed_requests() if ctx.llm is not None else 0) - failed_before
    unkeyed = unkeyed_reads(name, values, reads)
    if unkeyed:
        why_not = f"it read {', '.join(sorted(unkeyed))}, which its ranking key does not hold"
        log.warning("Rankings (%s): not cached: %s (declare them in its cache_knobs)", name, why_not)
    elif failed:
        why_not = f"{failed} LLM requests failed while ranking"
        log.warning("Rankings (%s): not cached: %s; a rerun asks again", name, why_not)
    elif key:
        save_rankings(ctx.cache_dir, key, rankings, made)
        failpoints.hit("rankings.saved")
    cache = "stored" if key and not why_not else f"not stored: {why_not or 'no cache folder'}"
    return Ranked(rankings, cache, key, sorted(reads), spend, made, own_index, sorted(index_reads))


def _checksum(arrays: dict[str, np.ndarray]) -> str:
    """sha256 over each array's name, dtype, shape and bytes: a file that parses but was altered fails it."""
    parts = []
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        parts += [f"{name}|{a.dtype.str}|{a.shape}".encode(), a.tobytes()]
    return bytes_digest(*parts)


def load_rankings(cache_dir: Path, key: str) -> list[Ranking] | None:
    """The cached rankings, or None: absent, or damaged (then reported, deleted, and recomputed by the caller)."""
    return load_ranked(cache_dir, key)[0]


def load_ranked(cache_dir: Path, key: str) -> tuple[list[Ranking] | None, dict | None]:
    """(the cached rankings, what computing them cost), or (None, None): absent, or damaged (then reported,
    deleted, and recomputed by the caller). The cost is None for a file written before it was kept."""
    path = Path(cache_dir) / "rankings" / f"{key}.npz"
    if not path.is_file():
        return None, None
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files if name != "checksum"}
            stored = str(data["checksum"]) if "checksum" in data.files else None
        if stored is None:
            raise ValueError("no checksum (written by an older version)")
        if stored != _checksum(arrays):
            raise ValueError("checksum mismatch")
        diags = json.loads(str(arrays["diagnostics"]))
        contexts = json.loads(str(arrays["contexts"])) if "contexts" in arrays else [None] * len(diags)
        orders, scores = arrays["order"], arrays["scores"]
        if "lengths" in arrays:  # partial rankings of different lengths, stored end to end
            cuts = np.cumsum(arrays["lengths"])[:-1]
            orders, scores = np.split(orders, cuts), np.split(scores, cuts)
        cost = json.loads(str(arrays["cost"])) if "cost" in arrays else None
        return [
            Ranking(order=o, scores=s, diagnostics=d, contexts=c)
            for o, s, d, c in zip(orders, scores, diags, contexts, strict=True)
        ], cost
    # what zipfile and numpy raise on damaged bytes (NotImplementedError, a RuntimeError: a garbled zip header)
    except (zipfile.BadZipFile, ValueError, KeyError, OSError, EOFError, RuntimeError, struct.error) as e:
        log.warning("%s: damaged cached rankings (%s); deleted, they are recomputed", path, e)
        try:
            path.unlink(missing_ok=True)
        except OSError:  # another user's file: the recomputed ranking replaces it (atomic rename)
            pass
        return None, None


def save_rankings(cache_dir: Path, key: str, rankings: list[Ranking], cost: dict | None = None) -> None:
    lengths = [len(r.order) for r in rankings]
    uniform = len(set(lengths)) <= 1
    join = np.stack if uniform else np.concatenate  # partial rankings (`Ranking`) differ in length
    arrays = {
        "order": join([np.asarray(r.order, dtype=np.int64) for r in rankings]),
        "scores": join([np.asarray(r.scores) for r in rankings]),
        **({} if uniform else {"lengths": np.array(lengths, dtype=np.int64)}),
        "diagnostics": np.array(json.dumps([r.diagnostics for r in rankings], default=float)),
        # the reader's texts, when a method sets them
        "contexts": np.array(json.dumps([r.contexts for r in rankings])),
        # what computing them cost (the ranking, the method's own index): a run that loads them still says it
        **({"cost": np.array(json.dumps(cost))} if cost is not None else {}),
    }
    buf = io.BytesIO()
    np.savez(buf, **arrays, checksum=np.array(_checksum(arrays)))
    # atomic: concurrent jobs never see half a file
    atomic_write_bytes(Path(cache_dir) / "rankings" / f"{key}.npz", buf.getvalue())


def llm_key(llm) -> dict:
    """The LLM as a ranking-cache key sees it: the backend and its decoding (temperature changes outputs too)."""
    return {"identity": llm.identity, "decoding": llm.decoding}

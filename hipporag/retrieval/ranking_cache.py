"""Cached rankings, in one place: what a ranking's key holds, the key, and whether to load, compute or store.

A ranking's key is derived from what its method read, as a build system keys a target by its dependency file:
the method runs on a context that records each knob, prompt role, LLM and query instruction it reads
(`retrieval.reads`), and the ranking is stored under (its base: the index, the method, its options, the
questions) plus the current values of those names. The names read are kept beside it (`rankings/reads/`), so a
later run looks up each recorded set of names with its own values: a damping sweep serves the dense baseline's
ranking to every job (dense never reads damping), and a method that reads a knob only under some settings
(v1's `damping` under `graph_walk=ppr`) has it in its key exactly then. No method lists its knobs. Each file
carries a checksum of its arrays: a damaged file is deleted and recomputed, never used.
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

from hipporag.cache.files import atomic_write_bytes, atomic_write_json
from hipporag.cache.keys import bytes_digest, file_digest, stable_key
from hipporag.core import failpoints
from hipporag.core.meter import Spend, measure
from hipporag.core.registry import Configured
from hipporag.prompts.loading import shipped
from hipporag.retrieval.methods import METHODS, get_method
from hipporag.retrieval.methods.base import Ranking, RankingContractError, RetrievalContext, ranking_violations
from hipporag.retrieval.reads import recording_context, role_read

log = logging.getLogger(__name__)

# Knobs that decide only what happens when an LLM request fails. A ranking computed under a failure is never
# stored, so a stored ranking cannot depend on them: reading them needs no place in the key.
FAILURE_POLICY_KNOBS = frozenset({"fail_on_llm_error", "max_llm_error_rate"})


def key_values(knobs, method: Configured, llm, embedder, prompts=None) -> dict:
    """What a ranking key may hold, by name: every knob (`filter_prompt` with its file's digest, so an
    edited file is another key), the method's options (its config group), the LLM with its decoding, each
    prompt-set role's digest (`<role>_messages`), the embedder's query instructions. A ranking's key holds
    those its method read (`ranking_key`), each name as `retrieval.reads` records it."""
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


def ranking_base(index_key: str, method: str, values: dict, questions: list[str]) -> str | None:
    """What every ranking of `method` on this index and these questions shares, whatever it reads: the index,
    the method, its options (they reach it through its constructor; a wrapping method's hold its base's), the
    questions. None for an unknown method (never cached)."""
    spec = METHODS.get(method)
    if spec is None:
        return None
    identity = {"index": index_key, "method": method, "options": values.get("method_options"), "questions": questions}
    if spec.base_of is not None:  # the wrapped method as configured, its YAML defaults included
        identity["base"] = spec.base_of(values)
    return stable_key(identity, length=24)


def ranking_key(base: str, values: dict, reads) -> str:
    """The content address of a ranking: its base and the current values of the names its method read
    (`values`: by name, as `key_values` gathers them). The failure policy never shapes a stored ranking."""
    names = sorted(set(reads) - FAILURE_POLICY_KNOBS)
    return stable_key({"base": base, "reads": {n: values.get(n) for n in names}}, length=24)


def recorded_reads(cache_dir: Path, base: str) -> list[list[str]]:
    """Each set of names a ranking with this base was stored under (one file per set: concurrent jobs never
    rewrite each other's). A damaged file is skipped: its ranking is computed again and the file rewritten."""
    sets = []
    for path in sorted((Path(cache_dir) / "rankings" / "reads").glob(f"{base}-*.json")):
        try:
            names = json.loads(path.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if isinstance(names, list) and all(isinstance(n, str) for n in names):
            sets.append(names)
    return sets


def record_reads(cache_dir: Path, base: str, reads) -> None:
    names = sorted(set(reads) - FAILURE_POLICY_KNOBS)
    digest = stable_key({"reads": names}, length=12)
    atomic_write_json(Path(cache_dir) / "rankings" / "reads" / f"{base}-{digest}.json", names)


def lookup(cache_dir: Path, base: str, values: dict) -> tuple[list[Ranking] | None, dict | None, str | None]:
    """(rankings, their cost, key) of a stored ranking whose recorded reads have these values; Nones if none."""
    for names in recorded_reads(cache_dir, base):
        key = ranking_key(base, values, names)
        loaded, made = load_ranked(cache_dir, key)
        if loaded is not None:
            return loaded, made, key
    return None, None, None


def unkeyed_reads(values: dict, reads: set[str]) -> set[str]:
    """What a method read that no key value stands for (so its key could not hold it): nothing, while every
    read goes through the recording context by the names `key_values` gives."""
    return set(reads) - set(values) - FAILURE_POLICY_KNOBS


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
    step_errors: list[str] = field(default_factory=list)  # a compared library's failed steps (its index is incomplete)


def rank(method: Configured, ctx: RetrievalContext, queries, index, values: dict) -> Ranked:
    """The method's rankings of `queries`: loaded when its key has them, else computed on a recording context,
    checked against the `Ranking` contract, and stored unless the key could be wrong for them (an LLM request
    failed meanwhile, the graph is this run's only, or the method read something outside its key)."""
    name = method.name
    base = ranking_base(index.key, name, values, [q.question for q in queries]) if ctx.cache_dir is not None else None
    why_not = None
    if base and not index.complete:
        log.warning(
            "Rankings (%s): computed on this run's incomplete graph, neither loaded from nor stored in the cache",
            name,
        )
        base, why_not = None, "this run's incomplete graph"
    if base:
        with measure(ctx.llm, ctx.embeddings) as spend:
            loaded, made, key = lookup(ctx.cache_dir, base, values)
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
    step_errors = list(getattr(instance, "step_errors", None) or [])  # a compared library's index that is broken
    unusable = list(getattr(instance, "unusable_answers", None) or [])  # answers a compared library could not parse
    key = ranking_key(base, values, reads) if base else None
    unkeyed = unkeyed_reads(values, reads)
    if unkeyed:
        why_not = f"it read {', '.join(sorted(unkeyed))}, which no key value stands for"
        log.warning("Rankings (%s): not cached: %s (add it to ranking_cache.key_values)", name, why_not)
    elif failed:
        why_not = f"{failed} LLM requests failed while ranking"
        log.warning("Rankings (%s): not cached: %s; a rerun asks again", name, why_not)
    elif step_errors:
        why_not = f"{len(step_errors)} steps of its library failed (e.g. {step_errors[0][:160]})"
        log.warning("Rankings (%s): not cached: %s; a rerun builds its index again", name, why_not)
    elif unusable:
        why_not = f"{len(unusable)} answers its library could not parse (e.g. {unusable[0][:160]})"
        log.warning("Rankings (%s): not cached: %s", name, why_not)
    elif key:
        save_rankings(ctx.cache_dir, key, rankings, made)
        record_reads(ctx.cache_dir, base, reads)
        failpoints.hit("rankings.saved")
    cache = "stored" if key and not why_not else f"not stored: {why_not or 'no cache folder'}"
    return Ranked(rankings, cache, key, sorted(reads), spend, made, own_index, sorted(index_reads), step_errors)


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

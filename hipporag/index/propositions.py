"""Passages split into propositions (Dense X Retrieval, Chen et al. 2023), cached per passage like OpenIE.

Why: the v1 paper's Proposition rows retrieve over passages rewritten as propositions by the published
propositionizer (`chentong00/propositionizer-wiki-flan-t5-large`). Two propositionizers:
- `FlanT5Propositionizer`: that checkpoint through transformers, as its authors' README runs it: the input
  `Title: {title}. Section: {section}. Content: {content}` (a passage's first line is its title, the section
  empty), greedy generation of at most `max_new_tokens`, the decoded text read with `json.loads` as a list of
  strings (anything else is unusable, as their `except: prop_list = []`);
- `LLMPropositionizer`: any `llm=` with the prompt set's `proposition` role (ours by default), its answer's
  JSON repaired (`openie.parse`).

`run_propositions` keeps each passage's result in a store keyed by the propositionizer's identity and the
passage's hash, committed per batch (a kill loses one batch), with what asking cost; a failed LLM request is
never stored, an unusable answer is (it is reproducible) and counted.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tqdm import tqdm

from hipporag.cache.keys import stable_key, text_hash
from hipporag.cache.store import KeyValueStore
from hipporag.core import termination
from hipporag.core.errors import SettingError
from hipporag.core.meter import Spend
from hipporag.core.weights import check_weights
from hipporag.index.openie.parse import decode_json

log = logging.getLogger(__name__)

PARSE_VERSION = 1  # bump when the same answer would give other propositions (in every identity)
FLAN_T5 = "chentong00/propositionizer-wiki-flan-t5-large"


def split_passage(passage: str) -> tuple[str, str]:
    """(title, content) of a passage string (`title\\ntext`, as every dataset here writes one)."""
    title, _, content = passage.partition("\n")
    return (title, content) if content else ("", title)


def flan_t5_input(passage: str, section: str = "") -> str:
    """The propositionizer's input, as its authors' README writes it."""
    title, content = split_passage(passage)
    return f"Title: {title}. Section: {section}. Content: {content}"


def strict_list(text: str) -> tuple[list[str], str | None]:
    """(propositions, error) as the propositionizer's README reads its output: `json.loads`, a list of strings."""
    try:
        value = json.loads(text)
    except ValueError as e:
        return [], f"not JSON ({e})"
    if not isinstance(value, list) or not all(isinstance(p, str) for p in value):
        return [], "not a JSON list of strings"
    return [p.strip() for p in value if p.strip()], None


def tolerant_list(text: str) -> tuple[list[str], str | None]:
    """(propositions, error) from an LLM's answer: the JSON found and repaired (`openie.parse`), a list of
    strings, or one under a `propositions` key."""
    value = decode_json(text)
    if isinstance(value, dict):
        value = next((v for k, v in value.items() if str(k).lower() in ("propositions", "proposition")), None)
    if not isinstance(value, list):
        return [], "no JSON list of propositions in the answer"
    kept = [p.strip() for p in value if isinstance(p, str) and p.strip()]
    return kept, None if kept else "an empty list of propositions"


@dataclass
class Propositions:
    """One passage's propositions, or why there are none (`error`), and what asking cost."""

    items: list[str]
    error: str | None = None
    raw: str | None = None  # the answer, kept when it was unusable
    transient: bool = False  # the request failed: never stored, asked again next run
    cost: dict = field(default_factory=dict)  # requests, input_tokens, output_tokens, seconds

    def to_bytes(self) -> bytes:
        return json.dumps({k: v for k, v in asdict(self).items() if k != "transient"}).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Propositions:
        return cls(**json.loads(data))


class FlanT5Propositionizer:
    """The published propositionizer (a Flan-T5 checkpoint, hub id or local folder), a batch per generate call."""

    batch_size = 32

    def __init__(self, model: str = FLAN_T5, max_new_tokens: int = 512, generate_batch: int = 8, device: str = "auto"):
        check_weights(model, "propositionizer model")  # one line when the weights cannot load
        import transformers
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        from hipporag.core.device import pick_device

        self.device = pick_device(device)
        self.tokenizer = AutoTokenizer.from_pretrained(model)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(model).to(self.device).eval()
        self.max_new_tokens, self.generate_batch = max_new_tokens, generate_batch
        self.identity = {
            "name": "flan_t5",
            "model": model,
            "revision": getattr(self.model.config, "_commit_hash", None),
            "max_new_tokens": max_new_tokens,
            "transformers": transformers.__version__,
            "parse": PARSE_VERSION,
        }

    def split(self, passages: list[str]) -> list[Propositions]:
        import torch

        out = []
        for start in range(0, len(passages), self.generate_batch):
            batch = [flan_t5_input(p) for p in passages[start : start + self.generate_batch]]
            t0 = time.perf_counter()
            inputs = self.tokenizer(batch, return_tensors="pt", padding=True).to(self.device)
            with torch.inference_mode():
                generated = self.model.generate(**inputs, max_new_tokens=self.max_new_tokens)
            texts = self.tokenizer.batch_decode(generated, skip_special_tokens=True)
            share = (time.perf_counter() - t0) / len(batch)
            pad = self.tokenizer.pad_token_id
            for text, ids, mask in zip(texts, generated, inputs["attention_mask"]):
                items, error = strict_list(text)
                cost = {
                    "requests": 1,
                    "input_tokens": int(mask.sum()),
                    "output_tokens": int((ids != pad).sum()),
                    "seconds": share,
                }
                out.append(Propositions(items, error, text if error else None, cost=cost))
        return out


class LLMPropositionizer:
    """Any `llm=` model with the prompt set's `proposition` role."""

    batch_size = 16

    def __init__(self, llm, prompts, max_new_tokens: int = 512):
        if llm is None:
            raise SettingError("method.propositionizer=llm needs an LLM (llm=)")
        if prompts is None or prompts.proposition is None:
            raise SettingError("method.propositionizer=llm needs a prompt set with a proposition role")
        self.llm, self.prompt, self.max_new_tokens = llm, prompts.proposition, max_new_tokens
        self.identity = {
            "name": "llm",
            "llm": llm.identity,
            "messages": self.prompt.digest,
            "max_new_tokens": max_new_tokens,
            "parse": PARSE_VERSION,
        }

    def split(self, passages: list[str]) -> list[Propositions]:
        conversations = []
        for p in passages:
            title, content = split_passage(p)
            conversations.append(self.prompt.render(title=title, content=content))
        answers = self.llm.generate(conversations, stage="proposition", max_new_tokens=self.max_new_tokens)
        out = []
        for g in answers:
            cost = {
                "requests": 1,
                "input_tokens": g.input_tokens,
                "output_tokens": g.output_tokens,
                "seconds": g.seconds,
            }
            if g.error is not None:
                out.append(Propositions([], f"LLM request failed: {g.error}", transient=True, cost=cost))
                continue
            items, error = tolerant_list(g.text)
            out.append(Propositions(items, error, g.text if error else None, cost=cost))
        return out


@dataclass
class PropositionStats:
    passages: int = 0
    cached: int = 0
    split: int = 0
    unusable: int = 0  # answers that arrived and gave no proposition (stored)
    failed_requests: int = 0  # LLM requests that failed (not stored)
    made: Spend = field(default_factory=Spend)  # what asking for every passage's propositions cost, by whichever run
    disk_bytes: int = 0  # this propositionizer's store (not the other stores beside it)


def proposition_store(cache_dir: Path, identity: dict) -> KeyValueStore:
    return KeyValueStore(Path(cache_dir) / "propositions" / f"{stable_key(identity)}.sqlite", identity)


def _store_bytes(path: Path) -> int:
    """What one store holds on disk: its SQLite file with its -wal / -shm, or its segment folder."""
    files = [p for hit in path.parent.glob(f"{path.name}*") for p in ([hit] if hit.is_file() else hit.rglob("*"))]
    return sum(p.stat().st_size for p in files if p.is_file())


def run_propositions(
    passages: list[str], propositionizer, cache_dir: Path | None
) -> tuple[list[Propositions], PropositionStats]:
    """Every passage's propositions, in order: the cached ones read, the rest split in committed batches
    (`cache_dir` None: nothing read or kept)."""
    store = proposition_store(cache_dir, propositionizer.identity) if cache_dir is not None else None
    keys = [text_hash(p) for p in passages]
    found = {k: Propositions.from_bytes(v) for k, v in store.get_many(keys).items()} if store is not None else {}
    todo = list(dict.fromkeys(k for k in keys if k not in found))
    text_of = dict(zip(keys, passages))
    stats = PropositionStats(passages=len(passages), cached=len(passages) - sum(k not in found for k in keys))
    log.info(
        "Propositions (%s): %d/%d passages from cache, %d to split",
        propositionizer.identity["name"],
        stats.cached,
        len(passages),
        len(todo),
    )
    batch = propositionizer.batch_size
    with tqdm(total=len(todo), desc="Propositions", unit="passage", disable=not todo) as bar:
        for start in range(0, len(todo), batch):
            termination.check()
            chunk = todo[start : start + batch]
            results = propositionizer.split([text_of[k] for k in chunk])
            if store is not None:
                store.put_many({k: r.to_bytes() for k, r in zip(chunk, results) if not r.transient})
            found.update(zip(chunk, results))
            bar.update(len(chunk))
    if store is not None:
        store.close()
        stats.disk_bytes = _store_bytes(store.path)
    stats.split = len(todo)
    ordered = [found[k] for k in keys]
    for r in {k: found[k] for k in keys}.values():
        stats.failed_requests += r.transient
        stats.unusable += bool(r.error) and not r.transient
        stats.made.llm_requests += r.cost.get("requests", 0)
        stats.made.input_tokens += r.cost.get("input_tokens", 0)
        stats.made.output_tokens += r.cost.get("output_tokens", 0)
        stats.made.llm_seconds += r.cost.get("seconds", 0.0)
    stats.made.wall_s = stats.made.llm_seconds
    if stats.unusable or stats.failed_requests:
        log.warning(
            "Propositions: %d passages gave no usable propositions and %d requests failed; those passages are "
            "retrieved by their own text (counted as fallbacks)",
            stats.unusable,
            stats.failed_requests,
        )
    return ordered, stats

"""Imported OpenIE: reuse a user's existing, expensive extraction (the official `openie_results_ner_*.json`).

Both layouts of the official file are read:
- v1 (HippoRAG 1 / legacy): docs[{title, text, passage, extracted_entities, extracted_triples}]
- v2 (HippoRAG 2): docs[{idx: "chunk-<md5 passage>", passage, extracted_entities, extracted_triples}]
Docs are matched to corpus passages by passage text ("title\\ntext"), or by the v2 `idx` when the text
differs only in ways the id still matches. A corpus passage with no extraction is an error listing how
many and which, unless `extractor.missing=extract`, which sends just those to `extractor.fallback`.
The results go through the normal OpenIE cache, so the file is read once per corpus.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from hipporag.cache.keys import file_digest
from hipporag.core.errors import UserError
from hipporag.core.textnorm import passage_id
from hipporag.index.openie.extraction import Extraction
from hipporag.index.openie.validity import valid_entities, valid_triples

log = logging.getLogger(__name__)


class OpenIEImportError(UserError, ValueError):
    """The imported OpenIE file is missing, malformed or does not cover the corpus."""

    hint = "fix extractor.path (an openie_results_ner_*.json of the official code), or extractor.missing=extract"


def read_openie_file(path: Path) -> tuple[dict[str, dict], str]:
    """Map passage text -> doc (and chunk id -> doc), and the layout name ('v1' or 'v2')."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise OpenIEImportError(f"{path}: OpenIE file not found (extractor.path)") from None
    except json.JSONDecodeError as e:
        raise OpenIEImportError(f"{path}: not valid JSON (line {e.lineno}: {e.msg})") from e
    except UnicodeDecodeError as e:
        raise OpenIEImportError(f"{path}: not UTF-8 text (byte offset {e.start}: {e.reason})") from e
    docs = data.get("docs") if isinstance(data, dict) else None
    if not isinstance(docs, list):
        raise OpenIEImportError(f"{path}: expected an object with a 'docs' list (official OpenIE results layout)")
    by_key: dict[str, dict] = {}
    layout = "v1"
    for i, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise OpenIEImportError(f"{path}: docs[{i}] is not an object")
        if "passage" in doc:
            passage = doc["passage"]
        elif "title" in doc and "text" in doc:
            passage = f"{doc['title']}\n{doc['text']}"
        else:
            raise OpenIEImportError(f"{path}: docs[{i}] has neither 'passage' nor 'title' + 'text'")
        for field in ("extracted_entities", "extracted_triples"):
            if not isinstance(doc.get(field, []), list):
                raise OpenIEImportError(f"{path}: docs[{i}] ({passage[:50]!r}): '{field}' is not a list")
        if str(doc.get("idx", "")).startswith("chunk-"):
            layout = "v2"
            by_key.setdefault(doc["idx"], doc)
        by_key.setdefault(passage, doc)
        by_key.setdefault(passage_id(passage), doc)
    return by_key, layout


class ImportedExtractor:
    def __init__(self, path: str, missing: str = "error", fallback=None, batch_size: int = 64):
        self.batch_size = batch_size  # passages committed to the cache together
        if not path:
            raise OpenIEImportError("extractor=imported needs extractor.path=FILE (an openie_results_ner_*.json)")
        if missing not in ("error", "extract"):
            raise OpenIEImportError(f"extractor.missing must be 'error' or 'extract', got {missing!r}")
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise OpenIEImportError(f"{self.path}: OpenIE file not found (extractor.path)")
        self.missing = missing
        self.fallback = fallback
        self._docs: dict[str, dict] | None = None
        self.layout = None
        self.report = {"file": str(self.path), "matched": 0, "extracted_by_fallback": 0}
        self.identity = {"name": "imported", "file_sha1": file_digest(self.path, "sha1")}
        if missing == "extract":
            self.identity["fallback"] = fallback.identity

    def _load(self) -> dict[str, dict]:
        if self._docs is None:
            self._docs, self.layout = read_openie_file(self.path)
            self.report["layout"] = self.layout
        return self._docs

    def _lookup(self, passage: str) -> dict | None:
        docs = self._load()
        return docs.get(passage) or docs.get(passage_id(passage))

    def check(self, passages: list[str]) -> None:
        """Fail before extracting anything if passages are missing and no fallback is allowed."""
        missing = [p for p in passages if self._lookup(p) is None]
        n_docs = len({id(d) for d in self._load().values()})
        log.info(
            "Imported OpenIE %s (%s layout, %d docs): %d of %d passages to import matched",
            self.path.name,
            self.layout,
            n_docs,
            len(passages) - len(missing),
            len(passages),
        )
        if missing and self.missing == "error":
            first = "; ".join(repr(p[:60]) for p in missing[:3])
            raise OpenIEImportError(
                f"{self.path}: {len(missing)} of {len(passages)} corpus passages have no extraction in this file "
                f"(first: {first}). Use extractor.missing=extract to extract just those with extractor.fallback."
            )

    def extract(self, passages: list[str]) -> list[Extraction]:
        out: list[Extraction | None] = []
        todo = []
        for i, p in enumerate(passages):
            doc = self._lookup(p)
            if doc is None:
                out.append(None)
                todo.append(i)
            else:
                out.append(
                    Extraction(  # the rule the LLM extractor applies to its answers too
                        entities=valid_entities(doc.get("extracted_entities", [])),
                        triples=valid_triples(doc.get("extracted_triples", [])),
                    )
                )
        self.report["matched"] += len(passages) - len(todo)
        if todo:
            if self.missing != "extract":
                self.check([passages[i] for i in todo])
            for i, e in zip(todo, self.fallback.extract([passages[i] for i in todo])):
                out[i] = e
            self.report["extracted_by_fallback"] += len(todo)
        return out  # type: ignore[return-value]

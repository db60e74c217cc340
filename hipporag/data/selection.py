"""Which of a dataset's questions a run asks (the `questions` config group): all of them, the ones named by id
(a list, or a file of ids), the first N (lm-eval's `--limit`), or the first N of those named.

Why a group of its own: a subset is a different experiment. Its choice is kept in the run record
(`RunRecord.questions`), a file of ids goes into the provenance by digest, and the paper comparison refuses to
set a subset beside a paper's full-set number. The corpus, and so the index, stays the whole dataset's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hipporag.core.errors import DatasetError, SettingError
from hipporag.core.registry import option, parse_options
from hipporag.core.rules import Rule, integer
from hipporag.data.dataset import Query

MAX_IDS_FILE_BYTES = 64 << 20  # a file of ids larger than this is not a list of question ids


def _ids_rule() -> Rule:
    return Rule(
        "a list of question ids or the path of a file of ids (one per line, or a JSON list)",
        lambda v: (
            (isinstance(v, list) and bool(v) and all(isinstance(x, (str, int)) for x in v))
            or (isinstance(v, str) and bool(v.strip()))
        ),
        optional=True,
    )


@dataclass(frozen=True)
class QuestionOptions:
    """The `questions` config group (conf/questions/all.yaml). `ids` first, in the dataset's order, then `limit`."""

    limit: int | None = option(integer(1, optional=True))
    ids: list | str | None = option(_ids_rule())

    @classmethod
    def from_config(cls, group: Mapping | None) -> QuestionOptions:
        """The group as typed options; a config saved before the group existed asks every question."""
        if group is None:
            return cls(limit=None, ids=None)
        options = parse_options(cls, group, "questions", "the question selection")
        options.wanted_ids()  # a missing or unreadable file of ids stops the run now, not after the index
        return options

    @property
    def everything(self) -> bool:
        return self.limit is None and self.ids is None

    def ids_file(self) -> Path | None:
        """The file the ids are read from, if they are given as one."""
        return Path(self.ids).expanduser() if isinstance(self.ids, str) else None

    def wanted_ids(self) -> list[str] | None:
        """The ids asked for, as strings, in the order given; None when no id is named."""
        if self.ids is None:
            return None
        path = self.ids_file()
        ids = [str(x) for x in (self.ids if path is None else _read_ids_file(path))]
        if not ids:
            raise SettingError(f"questions.ids={self.ids!r} names no question id")
        return ids


def _read_ids_file(path: Path) -> list[str]:
    if not path.is_file():
        raise SettingError(f"questions.ids={str(path)!r} is not allowed: no such file (a list [id, ...] or a file)")
    if path.stat().st_size > MAX_IDS_FILE_BYTES:
        raise SettingError(f"questions.ids={str(path)!r}: the file is over {MAX_IDS_FILE_BYTES >> 20} MiB")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SettingError(f"questions.ids={str(path)!r}: cannot read it ({type(e).__name__}: {e})") from None
    if path.suffix == ".json":
        try:
            ids = json.loads(text)
        except json.JSONDecodeError as e:
            raise SettingError(f"questions.ids={str(path)!r}: not JSON ({e.msg}, line {e.lineno})") from None
        if not isinstance(ids, list) or not all(isinstance(x, (str, int)) for x in ids):
            raise SettingError(f"questions.ids={str(path)!r}: expected a JSON list of question ids")
        return [str(x) for x in ids]
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def select_questions(
    queries: list[Query], options: QuestionOptions, source: Path | str
) -> tuple[list[Query], list[str] | None]:
    """The questions the run asks, in the dataset's order, and the ids asked for (None: none named); an id the
    dataset lacks stops the run in one line naming it and the questions file (`source`)."""
    wanted = options.wanted_ids()
    if wanted is not None:
        known = {q.id for q in queries}
        unknown = [i for i in dict.fromkeys(wanted) if i not in known]
        if unknown:
            more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
            raise DatasetError(
                f"{source}: no question with id {unknown[0]!r}{more} (questions.ids asks for {len(set(wanted))})",
                hint="check the ids against the questions file, or drop questions.ids",
            )
        chosen = set(wanted)
        queries = [q for q in queries if q.id in chosen]
    if options.limit is not None:
        queries = queries[: options.limit]
    return queries, wanted


def selection_record(options: QuestionOptions, selected: list[Query], of: int, wanted: list[str] | None) -> dict:
    """What the run record keeps of the choice: how many of how many, the limit, and the ids by count and
    digest (the file's path too), so that two runs on the same subset are seen to be on the same subset. `wanted`:
    the ids asked for, as `select_questions` read them."""
    ids = [q.id for q in selected]
    record: dict = {"selected": len(selected), "of": of, "subset": len(selected) < of, "limit": options.limit}
    if wanted is not None:
        record["ids"] = len(set(wanted))
        path = options.ids_file()
        if path is not None:
            record["ids_file"] = str(path)
    record["ids_sha1"] = hashlib.sha1(json.dumps(ids, ensure_ascii=True).encode()).hexdigest()
    return record

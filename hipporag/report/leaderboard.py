"""Exported tables (`hipporag export`) read back and put together as one leaderboard.

Why: results travel as exported tables (leaderboard.parquet / .csv), made on other days, machines or code
versions; comparing them means one table. Each table is checked once here (readable, the columns that
identify a row and at least one metric), so that the page (`report.leaderboard_html`) can trust what it
gets. Tables of different exports may hold different columns (another code version, other knobs): they are
combined on the union of their columns, a column a table lacks left empty, never guessed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pyarrow as pa

from hipporag.core.errors import UserError
from hipporag.report.export import TABLE

SUFFIXES = (".parquet", ".csv")
IDENTITY = ("sweep", "job", "method")  # what names a row: (sweep, job, method), as `report.export` writes it
METRIC = re.compile(r"recall@\d+|em|f1|judge")  # a metric column, not its _lo / _hi / _delta / _p companions
SOURCE = "export"  # the column saying which exported table a row came from


class LeaderboardError(UserError, ValueError):
    hint = "give folders written by `hipporag export` (or their leaderboard.parquet / .csv)"


def table_file(path: Path) -> Path | None:
    """The table file that `path` names: a folder's leaderboard.parquet, or a .parquet / .csv file itself;
    None when `path` is no exported table (a run or sweep folder, say)."""
    path = Path(path)
    if path.is_dir():
        found = path / f"{TABLE}.parquet"
        return found if found.is_file() else None
    return path if path.is_file() and path.suffix.lower() in SUFFIXES else None


def source_name(path: Path) -> str:
    """How a row's export is named: the folder as given (its table file's name dropped when it is the
    standard one), so that two exports' rows stay told apart even when their sweeps share a name."""
    path = Path(path)
    return str(path.parent if path.is_file() and path.stem == TABLE else path)


def _read(file: Path) -> pd.DataFrame:
    """The file as a frame; a damaged or unreadable one is a `LeaderboardError` naming it (one line)."""
    try:
        if file.suffix.lower() == ".csv":
            return pd.read_csv(file)
        return pd.read_parquet(file)
    except (OSError, ValueError, UnicodeDecodeError, NotImplementedError, pa.ArrowException) as e:
        kind = "CSV" if file.suffix.lower() == ".csv" else "parquet"
        raise LeaderboardError(f"{file}: not a readable {kind} file ({' '.join(str(e).split())[:160]})") from None


def _check(frame: pd.DataFrame, file: Path) -> None:
    """The columns every row needs: what names it, and at least one metric to rank it by."""
    missing = [c for c in IDENTITY if c not in frame.columns]
    if missing:
        raise LeaderboardError(f"{file}: no {', '.join(f'`{c}`' for c in missing)} column (not an exported table)")
    if not any(METRIC.fullmatch(str(c)) for c in frame.columns):
        raise LeaderboardError(f"{file}: no metric column (recall@k, em or f1): nothing to rank by")


def read_table(path: Path) -> pd.DataFrame:
    """One exported table, checked, with the `export` column first; the identity columns as text (a CSV reads
    job "0" as the number 0, the parquet as the text "0": the same row either way)."""
    file = table_file(path)
    if file is None:
        raise LeaderboardError(f"{path}: no {TABLE}.parquet in it, and not a .parquet or .csv file")
    frame = _read(file)
    _check(frame, file)
    frame = frame.astype(dict.fromkeys(IDENTITY, str))
    source = pd.DataFrame({SOURCE: [source_name(path)] * len(frame)}, index=frame.index)
    return pd.concat([source, frame], axis=1)  # one new frame: an insert into a wide one warns


def combine(paths: list[Path]) -> pd.DataFrame:
    """Every table of `paths` as one frame: rows in the order given, columns the union of theirs (a column a
    table lacks is empty in its rows). A table named twice (its folder and its file) is read once."""
    frames, seen = [], set()
    for path in paths:
        file = table_file(path)
        key = file.resolve() if file is not None else None
        if key in seen:
            continue
        seen.add(key)
        frames.append(read_table(path))
    if not frames:
        raise LeaderboardError("no exported table given")
    return pd.concat(frames, ignore_index=True, sort=False)

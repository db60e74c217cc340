"""The docs that describe the code are checked against it: ARCHITECTURE.md's module table names every module of
the package and nothing else, README's generated tables (knobs, config groups) are current, every knob has its
one comment in conf/config.yaml, and README's layout names every subpackage."""

from __future__ import annotations

import re
from pathlib import Path

from hipporag.report import reference

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hipporag"
TOP_LEVEL = "top level"


def architecture_table(text: str) -> list[tuple[str, list[str], str]]:
    """(subpackage, module names, what the row says) of each row of ARCHITECTURE.md's "Where each stage lives"."""
    section = text.split("## Where each stage lives", 1)[1].split("\n## ", 1)[0]
    rows, package = [], None
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if not line.startswith("|") or len(cells) != 3 or re.fullmatch(r"-+", cells[0]) or cells[0] == "subpackage":
            continue
        package = cells[0].strip("`") or package
        rows.append((package, re.findall(r"`([^`]+)`", cells[1]), cells[2]))
    return rows


def listed_modules(text: str) -> set[Path]:
    """The package files ARCHITECTURE.md's table names: `sub/` + `name` is sub/name.py (or a package), a folder
    entry (`openie/`) names its modules in the row's text, and a top-level command may be a package's __main__."""
    listed: set[Path] = set()
    for package, names, says in architecture_table(text):
        folder = PACKAGE if package == TOP_LEVEL else PACKAGE / package.rstrip("/")
        for name in names:
            if name.endswith("/"):
                inner = folder / name.rstrip("/")
                listed.add(inner / "__init__.py")
                listed |= {inner / f"{n}.py" for n in re.findall(r"`([a-z_0-9]+)`", says)}
            else:
                listed |= {folder / f"{name}.py", folder / name / "__main__.py", folder / name / "__init__.py"}
    return listed


def package_modules() -> set[Path]:
    """Every module of the package but the subpackages' own `__init__` (their docstrings say what they hold)."""
    return {p for p in PACKAGE.rglob("*.py") if not (p.name == "__init__.py" and p.parent.parent in (PACKAGE, ROOT))}


def test_architecture_lists_every_module_and_only_modules_that_exist():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    listed = listed_modules(text)
    modules = package_modules()
    unlisted = sorted(str(p.relative_to(ROOT)) for p in modules - listed)
    assert not unlisted, f"modules ARCHITECTURE.md's table does not name: {unlisted}"
    for package, names, _ in architecture_table(text):
        folder = PACKAGE if package == TOP_LEVEL else PACKAGE / package.rstrip("/")
        assert folder.is_dir(), f"ARCHITECTURE.md names a subpackage that does not exist: {package}"
        for name in names:
            candidates = [folder / name.rstrip("/"), folder / f"{name}.py"]
            assert any(c.exists() for c in candidates), f"ARCHITECTURE.md names {package}{name}, which does not exist"


def test_a_stale_line_in_the_module_table_fails_the_check():
    """The check above on a planted stale row (a renamed module) and a missing one."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    planted = text.replace("| | `multistep` |", "| | `multistep`, `chains_merge` |", 1)
    assert planted != text
    _, names, _ = next(r for r in architecture_table(planted) if "multistep" in r[1])
    assert not (PACKAGE / "retrieval" / "chains_merge.py").exists() and "chains_merge" in names
    dropped = text.replace("| | `multistep` |", "| | |", 1)
    assert PACKAGE / "retrieval" / "multistep.py" not in listed_modules(dropped)


def test_readme_generated_tables_are_current():
    assert reference.stale() == [], "run: python -m hipporag.report.reference --write"


def test_every_knob_has_its_comment_in_conf_config_yaml():
    import dataclasses

    from hipporag.core.knobs import Knobs

    docs = reference.knob_docs((ROOT / "conf" / "config.yaml").read_text())
    assert [f.name for f in dataclasses.fields(Knobs) if not docs.get(f.name, ("", ""))[1]] == []


def test_a_changed_default_makes_the_knob_table_stale(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text((ROOT / "README.md").read_text().replace("| `damping` | `0.5` |", "| `damping` | `0.3` |"))
    assert reference.stale(readme) == ["knobs"]


def test_readme_layout_names_every_subpackage():
    layout = (ROOT / "README.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    subpackages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert [s for s in subpackages if f"{s}/" not in layout] == []


def test_the_tests_architecture_says_set_failpoints_are_those_that_do():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    said = re.search(r"Only tests set them \(([^)]*)\)", text)[1]
    setters = [
        p.stem
        for p in sorted((ROOT / "tests").glob("test_*.py"))
        if p.name != "test_docs.py" and "HIPPORAG_FAILPOINT" in p.read_text()
    ]
    assert re.findall(r"`(test_\w+)`", said) == setters


def test_the_cache_table_names_every_folder_the_code_writes_under_cache_dir():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    table = text.split("## The cache", 1)[1].split("\n## ", 1)[0]
    written = {m for p in PACKAGE.rglob("*.py") for m in re.findall(r'cache_dir\)? / "([a-z_]+)"', p.read_text())}
    assert len(written) >= 10
    assert sorted(f for f in written if f"`{f}/" not in table) == []

"""The YAML loader for files a user or a folder supplies: what yaml.safe_load reads, less what can explode."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from hipporag.core.safe_yaml import MAX_DEPTH, YAMLRefused, YAMLTooLarge, load, load_file, read_capped

ROOT = Path(__file__).resolve().parents[1]
BOMB = "\n".join(
    ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)]
)


def test_the_harness_own_yaml_reads_as_safe_load_reads_it():
    """Every YAML file of the checkout (configs, shipped prompts, regressions): the same data, none refused."""
    files = [p for p in ROOT.glob("**/*.yaml") if not {".venv", "outputs", "node_modules"} & set(p.parts)]
    assert len(files) > 20
    for path in files:
        assert load_file(path, 1 << 20) == yaml.safe_load(path.read_text()), path


@pytest.mark.parametrize(
    "text, says",
    [
        (BOMB, "line 1, column 4: YAML anchors and aliases (&name, *name) are refused; write the value out"),
        ("x: &keep 1\n", "line 1, column 4: YAML anchors and aliases"),
        ("base: {k: 1}\nother:\n  <<: *base\n", "line 3, column 7: YAML anchors and aliases"),
        ("x: " + "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), f"nested deeper than {MAX_DEPTH} levels"),
        ("x: " + "[" * 5000, f"nested deeper than {MAX_DEPTH} levels"),  # safe_load: RecursionError
        ("n: " + "1" * 5000, "line 1, column 4: Exceeds the limit (4300 digits)"),  # safe_load: ValueError
        ("when: 2001-13-45\n", "line 1, column 7: month must be in 1..12"),
    ],
)
def test_what_safe_load_lets_explode_or_crash_is_one_yaml_error_line(text, says):
    start = time.monotonic()
    with pytest.raises(YAMLRefused) as e:
        load(text)
    assert says in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, yaml.YAMLError)  # callers that catch YAML errors already name their file
    assert time.monotonic() - start < 5


def test_the_bomb_is_what_safe_load_accepts():
    """The case above is real: safe_load takes it at once, and 9**9 strings come out when it is written."""
    data = yaml.safe_load(BOMB)
    assert data["i"][0][0][0][0][0][0][0][0][0] == "lol" and len(data["i"]) == 9
    assert len(json.dumps(data["d"])) > 30 * len(BOMB)  # three levels of nine: already 30 times the file


def test_a_file_over_the_limit_is_refused_by_its_size_before_it_is_read(tmp_path):
    big = tmp_path / "big.yaml"
    with big.open("wb") as f:
        f.truncate(50 << 20)  # 50 MB, sparse: nothing of it is read
    start = time.monotonic()
    with pytest.raises(YAMLTooLarge, match=r"^52,428,800 bytes, over the limit of 1,048,576 bytes$"):
        load_file(big, 1 << 20)
    assert time.monotonic() - start < 1


def test_a_file_whose_size_says_less_than_it_holds_is_cut_at_the_limit():
    """/proc files stat as 0 bytes; what is read counts."""
    environ = Path("/proc/self/environ")
    assert environ.stat().st_size == 0
    with pytest.raises(YAMLTooLarge, match="over the limit of 4 bytes"):
        read_capped(environ, 4)

"""`hipporag COMMAND`: one command line that lists every command and runs each with its own parser."""

from __future__ import annotations

from pathlib import Path

import pytest

from hipporag import cli

PACKAGE = Path(cli.__file__).parent


def test_help_lists_every_command_module_of_the_package(capsys):
    assert cli.main(["--help"]) == 0
    printed = capsys.readouterr().out
    modules = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "entry", "cli", "api"}  # api: the library
    modules |= {p.parent.name for p in PACKAGE.glob("*/__main__.py")}  # `python -m hipporag.<package>` commands
    listed = {module.split(".")[1] for module, _ in cli.COMMANDS.values()}
    assert modules <= listed  # a new `python -m hipporag.<command>` module must be listed here too
    for name, (_, text) in cli.COMMANDS.items():
        assert f"  {name.ljust(max(map(len, cli.COMMANDS)))}  {text}" in printed


def test_a_command_runs_with_its_own_parser_and_exit_code(capsys):
    assert cli.main(["regress", "--list"]) == 0
    out = capsys.readouterr().out
    assert "demo_ircot" in out and "musique_train-fidelity" in out
    assert cli.main(["regress", "--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: hipporag regress")
    assert cli.main(["regress", "no-such-regression"]) == 2


def test_an_unknown_command_is_one_line_naming_the_commands(capsys):
    assert cli.main(["regres"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no command 'regres'") and "regress" in err and len(err.splitlines()) == 1


def test_every_command_names_itself_in_its_usage_line(capsys):
    for name in cli.COMMANDS:
        assert cli.main([name, "--help"]) == 0
        assert capsys.readouterr().out.startswith(f"usage: hipporag {name} "), name


def test_each_command_run_with_python_m_names_itself():
    import subprocess
    import sys

    for module, _ in cli.COMMANDS.values():
        module = module.removesuffix(".__main__")
        out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, check=True)
        assert out.stdout.startswith(f"usage: python -m {module} "), out.stdout[:80]


@pytest.mark.parametrize("value", ["nan", "-1", "inf", "-inf", "1e-3x"])
def test_rerun_refuses_a_tolerance_that_is_not_a_finite_number_of_zero_or_more(value, capsys, tmp_path):
    from hipporag.rerun import main as rerun_main

    with pytest.raises(SystemExit) as e:
        rerun_main([str(tmp_path), f"--tolerance={value}"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --tolerance" in err and value in err and "Traceback" not in err

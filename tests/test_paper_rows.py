"""`python -m hipporag.reproduce --rows`: every row of both papers' tables with the setting that runs it. The
list names every row of reproduce/paper_numbers/ and nothing else; each setting composes and passes the
settings check; a job run with it is paired with that very row by the comparison, with no retriever, OpenIE
or ablation difference named (what is left to the user is the dataset and the paper's LLM)."""

from __future__ import annotations

import pytest
from cli import run_cli
from omegaconf import OmegaConf

from hipporag.harness.record import MethodRecord, RunRecord
from hipporag.harness.settings import compose_each, load_settings
from hipporag.paper.compare import _differences, match_paper_row, our_row
from hipporag.paper.numbers import TABLES, load_table
from hipporag.paper.rows import ROWS, paper_rows

RUNNABLE = sorted(key for key, setting in ROWS.items() if setting.runnable)


def test_every_paper_row_is_listed_once_and_nothing_else_is():
    listed = [(stem, row) for stem, _, row in paper_rows()]
    assert len(listed) == len(set(listed)) == 60
    assert set(listed) == set(ROWS)
    assert len(RUNNABLE) == 60  # a row nothing here runs would say why (RowSetting.missing)
    assert all(ROWS[key].missing for key in set(ROWS) - set(RUNNABLE))


@pytest.fixture(scope="module")
def composed():
    """Each runnable row's config, as `python run.py +experiment=PRESET OVERRIDES` composes it (one Hydra
    initialisation for all of them)."""
    lists = [[f"+experiment={ROWS[key].preset}", *ROWS[key].overrides] for key in RUNNABLE]
    return dict(zip(RUNNABLE, compose_each(lists)))


@pytest.mark.parametrize("stem, row", RUNNABLE, ids=[f"{s}: {r}" for s, r in RUNNABLE])
def test_each_setting_runs_the_row_it_names_in_the_papers_setting(composed, stem, row):
    setting = ROWS[(stem, row)]
    table = TABLES[setting.preset]
    assert table.file_stem == stem
    cfg = composed[(stem, row)]
    load_settings(cfg)  # the settings check: every knob and option valid
    cfg = OmegaConf.to_container(cfg, resolve=True)
    ablation = next((o.split("=", 1)[1] for o in setting.overrides if o.startswith("+ablation=")), None)
    method = cfg["method"]["name"]
    record = RunRecord(method=method, methods={method: MethodRecord(recall={})}, dataset="musique")
    ours = our_row("0", method, False, cfg, record, table, ablation)
    name, by_metric = match_paper_row(ours, table, load_table(table), "musique")
    assert name == row
    differences = _differences(ours, next(iter(by_metric.values())), "musique", "", table)
    llm_openie = (cfg.get("extractor") or {}).get("name") == "llm"  # the paper's OpenIE LLM is the user's llm=
    named = [
        d
        for d in differences
        if (d.split(" ", 1)[0] in ("retriever", "ablation", "switches") and not d.endswith("not stated in Table 2"))
        or (d.startswith("OpenIE") and not llm_openie)
    ]
    assert named == [], differences


def test_the_command_prints_the_list_and_the_count():
    proc = run_cli("-m", "hipporag.reproduce", "--rows")
    assert (
        "| HippoRAG | 2 | ColBERTv2 | `python run.py +experiment=v1_table2_colbertv2 method=colbertv2` |" in proc.stdout
    )
    assert (
        "| RAPTOR (ColBERTv2) | `python run.py +experiment=v1_table2_colbertv2 method=raptor_colbertv2` |"
        in proc.stdout
    )
    assert "not here" not in proc.stdout
    assert proc.stdout.rstrip().endswith(
        "60 of 60 rows run in their stated setting (add dataset=, llm= as the paper's)."
    )

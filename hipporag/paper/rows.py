"""Every row of both papers' tables with the setting that runs it here, or why none does.

Why: a researcher reproducing a table wants, for each of its rows, the one command that runs it in the
paper's stated setting (retriever, OpenIE, ablation, reader), and to see at a glance which rows this harness
cannot run and why. `python -m hipporag.reproduce --rows` prints the list; `tests/test_paper_rows.py` checks
that it names every row of `reproduce/paper_numbers/`, that each setting composes and validates, and that a
job run with it is paired with that very row by the comparison (`paper.compare`).

A setting is a preset (`+experiment=NAME`, the table's sweep) and the overrides that pick the row's job in
it; the models it needs are the ones its config names (the reader and OpenIE LLM of the paper are the
user's `llm=` choice, and every comparison names a difference from the paper's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hipporag.paper.numbers import PAPERS, load_all


@dataclass(frozen=True)
class RowSetting:
    preset: str | None = None  # +experiment=NAME
    overrides: tuple[str, ...] = ()  # what picks the row's job in the preset
    missing: str | None = None  # why nothing here runs the row

    @property
    def runnable(self) -> bool:
        return self.missing is None

    def command(self) -> str:
        return " ".join(["python run.py", f"+experiment={self.preset}", *self.overrides])


def _in(preset: str, *overrides: str) -> RowSetting:
    return RowSetting(preset, overrides)


def _graph(preset: str, *overrides: str) -> RowSetting:
    """A row whose graph is built by LLM OpenIE in the paper (GPT-3.5 in v1, Llama-3.3-70B in HippoRAG 2)."""
    return RowSetting(preset, (*overrides, "extractor=llm"))


_DENSE = {
    "Contriever": "contriever",
    "GTR (T5-base)": "gtr",
    "GTE-Qwen2-7B-Instruct": "gte_qwen2",
    "GritLM-7B": "gritlm",
    "NV-Embed-v2 (7B)": "nvembed_v2",
}
_HIPPORAG2 = {  # HippoRAG 2's own comparison: NV-Embed-v2 for every embedding method (its section 5)
    "BM25": ("method=bm25",),
    **{row: ("method=dense", f"embedder={emb}") for row, emb in _DENSE.items()},
    "RAPTOR": ("method=raptor", "embedder=nvembed_v2"),
    "HippoRAG": ("method=hipporag", "embedder=nvembed_v2", "extractor=llm"),
    "HippoRAG 2": ("method=hipporag2", "embedder=nvembed_v2", "extractor=llm"),
}
ROWS: dict[tuple[str, str], RowSetting] = {
    # HippoRAG 2, Table 2 (QA F1) and Table 3 (recall@5)
    ("hipporag2_table2", "None"): _in("table2_qa", "method=no_retrieval"),
    **{("hipporag2_table2", row): _in("table2_qa", *o) for row, o in _HIPPORAG2.items()},
    ("hipporag2_table2", "GraphRAG"): _in("table2_qa", "method=graphrag", "embedder=nvembed_v2"),
    ("hipporag2_table2", "LightRAG"): _in("table2_qa", "method=lightrag", "embedder=nvembed_v2"),
    **{("hipporag2_table3", row): _in("table3_methods", *o) for row, o in _HIPPORAG2.items() if row != "HippoRAG"},
    ("hipporag2_table3", "HippoRAG (reproduced)"): _graph("table3_methods", "method=hipporag", "embedder=nvembed_v2"),
    ("hipporag2_table3", "HippoRAG*"): _graph("table3_methods", "method=hipporag_colbertv2"),
    # HippoRAG 2, Table 4 (ablations) and Table 5 (passage node weight)
    **{
        ("hipporag2_table4", row): _graph("table4_ablations", f"+ablation={ablation}", "embedder=nvembed_v2")
        for row, ablation in {
            "HippoRAG 2": "full",
            "w/o Filter": "no_filter",
            "w/ NER to node": "ner_to_node",
            "w/ Query to node": "query_to_node",
            "w/o Passage Node": "no_passage_nodes",
        }.items()
    },
    **{
        ("hipporag2_table5", f"Weight {w}"): _graph(
            "table5_passage_node_weight", f"passage_node_weight={w}", "embedder=nvembed_v2"
        )
        for w in ("0.01", "0.05", "0.1", "0.3", "0.5")
    },
    # HippoRAG v1, Table 2 (single-step retrieval)
    ("hipporag_v1_table2", "BM25"): _in("v1_table2", "method=bm25"),
    ("hipporag_v1_table2", "Contriever"): _in("v1_table2", "method=dense", "embedder=contriever"),
    ("hipporag_v1_table2", "GTR"): _in("v1_table2", "method=dense", "embedder=gtr"),
    ("hipporag_v1_table2", "HippoRAG (Contriever)"): _graph("v1_table2", "method=hipporag", "embedder=contriever"),
    ("hipporag_v1_table2", "ColBERTv2"): _in("v1_table2_colbertv2", "method=colbertv2"),
    ("hipporag_v1_table2", "HippoRAG (ColBERTv2)"): _graph("v1_table2_colbertv2", "method=hipporag_colbertv2"),
    ("hipporag_v1_table2", "RAPTOR"): _in("v1_table2", "method=raptor", "embedder=contriever"),
    ("hipporag_v1_table2", "RAPTOR (ColBERTv2)"): _in("v1_table2_colbertv2", "method=raptor_colbertv2"),
    ("hipporag_v1_table2", "Proposition"): _in("v1_table2_proposition", "method=proposition", "embedder=gtr"),
    ("hipporag_v1_table2", "Proposition (ColBERTv2)"): _in("v1_table2_proposition", "method=proposition_colbertv2"),
    # HippoRAG v1, Table 3 (IRCoT retrieval)
    ("hipporag_v1_table3", "IRCoT + BM25 (Default)"): _in("v1_table3_ircot", "method.base=bm25"),
    ("hipporag_v1_table3", "IRCoT + Contriever"): _in("v1_table3_ircot", "method.base=dense", "embedder=contriever"),
    ("hipporag_v1_table3", "IRCoT + HippoRAG (Contriever)"): _graph(
        "v1_table3_ircot", "method.base=hipporag", "embedder=contriever"
    ),
    ("hipporag_v1_table3", "IRCoT + ColBERTv2"): _in("v1_table3_ircot_colbertv2", "method.base=colbertv2"),
    ("hipporag_v1_table3", "IRCoT + HippoRAG (ColBERTv2)"): _graph(
        "v1_table3_ircot_colbertv2", "method.base=hipporag_colbertv2"
    ),
    # HippoRAG v1, Table 4 (QA)
    ("hipporag_v1_table4", "None"): _in("v1_table4_qa", "method=no_retrieval"),
    ("hipporag_v1_table4", "ColBERTv2"): _in("v1_table4_qa", "method=colbertv2"),
    ("hipporag_v1_table4", "HippoRAG (ColBERTv2)"): _graph("v1_table4_qa", "method=hipporag_colbertv2"),
    ("hipporag_v1_table4", "IRCoT (ColBERTv2)"): _in("v1_table4_ircot_qa", "method.base=colbertv2"),
    ("hipporag_v1_table4", "IRCoT + HippoRAG (ColBERTv2)"): _graph(
        "v1_table4_ircot_qa", "method.base=hipporag_colbertv2"
    ),
    # HippoRAG v1, Table 5 (dissecting HippoRAG (ColBERTv2))
    ("hipporag_v1_table5", "HippoRAG"): _graph("v1_table5", "node_specificity=true", "synonymy_edges=true"),
    ("hipporag_v1_table5", "Ablations: w/o Node Specificity"): _graph("v1_table5", "node_specificity=false"),
    ("hipporag_v1_table5", "Ablations: w/o Synonymy Edges"): _graph("v1_table5", "synonymy_edges=false"),
    ("hipporag_v1_table5", "OpenIE alternatives: REBEL"): _in("v1_table5", "extractor=rebel"),
    ("hipporag_v1_table5", "OpenIE alternatives: Llama-3.1-8B-Instruct"): _in(
        "v1_table5", "extractor=llm", "llm=vllm", "llm.model=meta-llama/Llama-3.1-8B-Instruct"
    ),
    ("hipporag_v1_table5", "OpenIE alternatives: Llama-3.1-70B-Instruct"): _in(
        "v1_table5", "extractor=llm", "llm=vllm", "llm.model=meta-llama/Llama-3.1-70B-Instruct"
    ),
    ("hipporag_v1_table5", "PPR alternatives: Rq Nodes Only"): _graph(
        "v1_table5", "node_specificity=true", "synonymy_edges=true", "graph_walk=query_nodes"
    ),
    ("hipporag_v1_table5", "PPR alternatives: Rq Nodes & Neighbors"): _graph(
        "v1_table5", "node_specificity=true", "synonymy_edges=true", "graph_walk=neighbors"
    ),
}


def paper_rows(directory=None) -> list[tuple[str, str, str]]:
    """(file stem, table number, paper row) of every row of the paper-number files, in their order."""
    seen: dict[tuple[str, str], str] = {}
    for rec in load_all(directory):
        seen.setdefault((Path(rec["file"]).stem, rec["paper_row"]), rec["table"])
    return [(stem, table, row) for (stem, row), table in seen.items()]


def rows_report(directory=None) -> str:
    """The markdown list of every paper row and the command that runs it, with the count."""
    rows = paper_rows(directory)
    lines = ["| paper | table | row | runs with |", "|---|---|---|---|"]
    runnable = 0
    for stem, table, row in rows:
        setting = ROWS.get((stem, row))
        if setting is None:
            how = "**not paired**: no entry in hipporag/paper/rows.py"
        elif setting.runnable:
            how = f"`{setting.command()}`"
            runnable += 1
        else:
            how = f"not here: {setting.missing}"
        paper = PAPERS[stem.rsplit("_table", 1)[0]].split(" (")[0]
        lines.append(f"| {paper} | {table} | {row} | {how} |")
    lines += ["", f"{runnable} of {len(rows)} rows run in their stated setting (add dataset=, llm= as the paper's)."]
    return "\n".join(lines)

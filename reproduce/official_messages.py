"""Are the harness's LLM requests the official HippoRAG 2's, byte for byte? Measured on musique_train.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/official_messages.py \
        --checkout /work/official-hipporag --official-python /work/official-venv/bin/python [--write]
    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/official_messages.py --harness-only [--checkout DIR] \
        [--limit N] [--passages N] --keep DIR

(how to make the checkout and the official venv: reproduce/official_side/README.md). Steps, all local:

1. `python -m hipporag.prompts import-official CHECKOUT` into a temporary folder;
2. a recording OpenAI-compatible server (reproduce/official_side/recording_server.py) for each side;
3. the harness: `python run.py dataset=musique_train extractor=imported` (official GPT-3.5 OpenIE),
   hipporag2 with the dense baseline, `llm=openai` at its server, `prompts=<the imported folder>`: 100
   reader requests per method;
4. the official `HippoRAG.qa` (reproduce/official_side/official_qa.py, in the official venv) on the same
   questions with the same top-5 passages the harness read, at the other server;
5. the same for OpenIE: the harness's LLM extractor and the official `OpenIE.batch_openie` on the first
   `--passages` passages of the corpus (NER, then triples conditioned on the parsed entities).

It prints how many requests are byte-identical (the messages, as the server received them), whether the
parsed answers and per-query EM/F1 equal the official evaluators', and how the request bodies differ
otherwise. `--write` replaces the block between the `messages` markers of reproduce/FIDELITY.md.

`--harness-only` runs steps 1 (when --checkout is given; else the shipped prompt set), 2, 3 and the harness's
half of 5, without the official code: it writes the official side's inputs (queries.json, passages.json) and
the harness's request logs to --keep, and prints whether each reader request the harness sent is the one its
record's question and passages (the official side's input) give. `--limit N`: the first N questions.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pandas as pd

from hipporag.harness.record import RECORDS_FILE

ROOT = Path(__file__).resolve().parents[1]
SERVER = ROOT / "reproduce" / "official_side" / "recording_server.py"
OFFICIAL_QA = ROOT / "reproduce" / "official_side" / "official_qa.py"
MODEL = "meta-llama/Llama-3.3-70B-Instruct"  # only a name here: the recording server answers
START, END = "<!-- messages:start -->", "<!-- messages:end -->"


class Server:
    """A recording server in its own process; `requests()` reads what it logged."""

    def __init__(self, log: Path, extra: list[str] | tuple[str, ...] = ()):
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVER), "--port", "0", "--log", str(log), "--model", MODEL, *extra],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        self.url = line.split()[2]  # "listening on http://127.0.0.1:P/v1 log=..."

    def requests(self) -> list[dict]:
        lines = self.log.read_text().splitlines() if self.log.is_file() else []
        return [r for r in map(json.loads, lines) if r.get("path", "").endswith("/chat/completions")]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def usage_error(message: str):
    """Stop in one line, exit status 2 (as argparse does for a bad argument)."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def check_official(checkout: Path | None, python: str | None, harness_only: bool = False) -> None:
    """Stop in one line unless --checkout is an official checkout and --official-python runs (before anything
    is started); with --harness-only neither is needed, and a --checkout given is only read for its prompts."""
    if checkout is None and not harness_only:
        usage_error("--checkout is required: a checkout of OSU-NLP-Group/HippoRAG (or pass --harness-only)")
    if checkout is not None and not (checkout / "src" / "hipporag" / "HippoRAG.py").is_file():
        usage_error(
            f"--checkout {checkout}: not a checkout of OSU-NLP-Group/HippoRAG (no src/hipporag/HippoRAG.py; "
            "reproduce/official_side/README.md makes one)"
        )
    if harness_only:
        return
    if python is None:
        usage_error("--official-python is required: the official venv's Python (or pass --harness-only)")
    if shutil.which(python) is None:
        usage_error(f"--official-python {python}: not an executable (reproduce/official_side/README.md makes one)")


def canonical(messages) -> str:
    return json.dumps(messages, ensure_ascii=False, sort_keys=False)


def harness_run(
    data: Path, prompts: Path | None, url: str, cache: Path, out: Path, limit: int | None = None
) -> pd.DataFrame:
    openie = data / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
    cmd = [
        sys.executable,
        "run.py",
        "dataset=musique_train",
        "extractor=imported",
        f"extractor.path={openie}",
        "method=hipporag2",
        "filter=none",
        "baseline=dense",
        "llm=openai",
        f"llm.base_url={url}",
        f"llm.model={MODEL}",
        f"llm.identity=recording-{uuid.uuid4().hex[:8]}",  # a fresh response cache: every request is sent
        "reader.max_new_tokens=2048",  # the official client's max_tokens
        *([f"prompts={prompts}"] if prompts else []),
        *([f"questions.limit={limit}"] if limit else []),
        "tracker=none",
        f"cache_dir={cache}",
        f"hydra.run.dir={out}",
    ]
    env = {**os.environ, "HIPPORAG_DATA_DIR": str(data), "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": "sk-local"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode not in (0, 3):
        sys.exit(proc.stderr[-4000:])
    return pd.read_parquet(out / RECORDS_FILE)


def official(python: str, checkout: Path, args: list[str], out: Path) -> dict:
    cmd = [python, str(OFFICIAL_QA), "--checkout", str(checkout), "--model", MODEL, "--out", str(out), *args]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OPENAI_API_KEY": "sk-local"}
    )
    if proc.returncode:
        sys.exit(proc.stderr[-4000:])
    return json.loads(out.read_text())


def first_difference(a: str, b: str) -> str:
    i = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"at character {i}: harness {a[max(0, i - 30) : i + 30]!r} / official {b[max(0, i - 30) : i + 30]!r}"


def body_fields(requests: list[dict]) -> str:
    seen = {}
    for r in requests:
        body = r["body"]
        seen[json.dumps({k: v for k, v in body.items() if k != "messages"}, sort_keys=True)] = True
    return "; ".join(seen)


def reader_block(ours: pd.DataFrame, ours_req: list[dict], theirs: dict, theirs_req: list[dict], records) -> list[str]:
    sent = {canonical(r["body"]["messages"]) for r in ours_req}
    by_question = {}
    for r in ours_req:
        by_question.setdefault(r["body"]["messages"][-1]["content"], r)
    lines, identical, shown = [], {}, []
    # the official client sends the records in order, skipping a record whose messages it already asked
    # (its response cache): a repeated (question, passages) pair reuses the earlier record's request
    official_of, seen, j = [], {}, 0
    for rec in records:
        key = (rec["question"], tuple(rec["docs"][:5]))
        if key not in seen:
            seen[key] = theirs_req[j]
            j += 1
        official_of.append(seen[key])
    assert j == len(theirs_req), (j, len(theirs_req))
    for rec, req in zip(records, official_of):
        key = canonical(req["body"]["messages"])
        ok = key in sent
        identical.setdefault(rec["method"], []).append(ok)
        if not ok and len(shown) < 3:
            near = by_question.get(req["body"]["messages"][-1]["content"])
            shown.append(
                f"  - {rec['method']} {rec['id']}: "
                + (
                    first_difference(canonical(near["body"]["messages"]), key)
                    if near
                    else "no harness request with that last message"
                )
            )
    pairs = list(zip(records, theirs["per_query"]))
    same = {
        "answer": [r["answer"] == o["answer"] for r, o in pairs],
        "em": [abs(r["em"] - o["em"]) < 1e-12 for r, o in pairs],
        "f1": [abs(r["f1"] - o["f1"]) < 1e-9 for r, o in pairs],
    }
    n = len(records)
    lines.append(
        "| method | reader requests byte-identical to the official | parsed answers equal | EM equal | F1 equal |"
    )
    lines.append("|---|---|---|---|---|")
    for method, oks in identical.items():
        mine = [i for i, r in enumerate(records) if r["method"] == method]
        lines.append(
            f"| {method} | {sum(oks)} of {len(oks)} | "
            + " | ".join(f"{sum(same[k][i] for i in mine)} of {len(mine)}" for k in ("answer", "em", "f1"))
            + " |"
        )
    lines.append("")
    lines.append(
        f"- all {n} reader answers: parsed answers equal {sum(same['answer'])}, EM equal {sum(same['em'])}, "
        f"F1 equal {sum(same['f1'])}; "
        f"mean EM / F1: harness {ours.em.mean():.4f} / {ours.f1.mean():.4f}, official evaluators "
        f"{sum(o['em'] for o in theirs['per_query']) / n:.4f} / {sum(o['f1'] for o in theirs['per_query']) / n:.4f}"
    )
    lines += shown
    lines.append(f"- request fields besides the messages: harness `{body_fields(ours_req)}`")
    lines.append(f"  official `{body_fields(theirs_req)}`")
    return lines


def openie_block(passages: list[str], ours_req: list[dict], theirs_req: list[dict], ours_ex, theirs: dict) -> list[str]:
    def stage(reqs, triple: bool):
        return {
            canonical(r["body"]["messages"])
            for r in reqs
            if ('"named_entities"' in r["body"]["messages"][-1]["content"]) == triple
        }

    lines = ["| OpenIE stage | harness requests | official requests | byte-identical |", "|---|---|---|---|"]
    for name, triple in (("NER", False), ("triples", True)):
        a, b = stage(ours_req, triple), stage(theirs_req, triple)
        lines.append(f"| {name} | {len(a)} | {len(b)} | {len(a & b)} of {len(b)} |")
    same_entities = sum(list(mine.entities) == o["entities"] for mine, o in zip(ours_ex, theirs["passages"]))
    lines.append("")
    lines.append(
        f"- {len(passages)} passages; entity lists parsed from the same NER answers equal: {same_entities} of {len(passages)}"
    )
    lines.append(f"- request fields besides the messages: harness `{body_fields(ours_req)}`")
    lines.append(f"  official `{body_fields(theirs_req)}`")
    return lines


def scoring_block(args, records: list[dict], tmp: Path) -> list[str]:
    """EM / F1 of the official evaluators and ours on the same predictions, beyond the server's answers (which
    never match a gold answer): each gold answer itself, the same with an article, punctuation and capitals
    ("The X."), its first word, and the harness's answer."""
    from hipporag.eval.metrics import exact_match, f1_score

    pairs = []
    for r in records[:100]:
        gold = r["gold_answers"]
        for prediction in (gold[0], f"The {gold[0].upper()}.", gold[0].split()[0], r["answer"]):
            pairs.append({"gold_answers": gold, "prediction": prediction})
    (tmp / "pairs.json").write_text(json.dumps(pairs))
    theirs = official(args.official_python, args.checkout, ["--score", str(tmp / "pairs.json")], tmp / "scores.json")
    em = sum(exact_match(p["prediction"], p["gold_answers"]) == o["em"] for p, o in zip(pairs, theirs["per_pair"]))
    f1 = sum(
        abs(f1_score(p["prediction"], p["gold_answers"]) - o["f1"]) < 1e-9 for p, o in zip(pairs, theirs["per_pair"])
    )
    hits = sum(o["em"] for o in theirs["per_pair"])
    return [
        f"- EM / F1 on {len(pairs)} predictions (gold answers, 'The GOLD.' variants, first words, our answers; "
        f"{hits:.0f} exact matches): EM equal for {em}, F1 equal for {f1}"
    ]


def harness_reader_block(records: list[dict], ours_req: list[dict], reader) -> list[str]:
    """--harness-only: are the reader requests the harness sent those its records (the official side's input:
    question and top-5 passages, whole) give under the prompt set, and nothing else?"""
    sent = collections.Counter(canonical(r["body"]["messages"]) for r in ours_req)
    rebuilt = [canonical(reader.messages(rec["question"], rec["docs"])) for rec in records]
    methods = collections.Counter(rec["method"] for rec in records)
    return [
        f"- reader: {len(records)} records ({', '.join(f'{m} {n}' for m, n in methods.items())}); "
        f"{sum(sent.values())} requests sent, {len(sent)} distinct; records whose request, rebuilt from the "
        f"official side's input, was sent: {sum(k in sent for k in rebuilt)} of {len(records)}; "
        f"requests no record gives: {len(set(sent) - set(rebuilt))}",
        f"- request fields besides the messages: harness `{body_fields(ours_req)}`",
    ]


def harness_openie_block(passages: list[str], ours_req: list[dict], ours_ex) -> list[str]:
    """--harness-only: the harness's OpenIE requests, per stage (as the recording server told them apart to
    answer them), and what it parsed from the answers."""
    sys.path.insert(0, str(SERVER.parent))
    from recording_server import prompt_kind

    kinds = collections.Counter(prompt_kind(r["body"]["messages"]) for r in ours_req)
    return [
        f"- OpenIE: {len(passages)} passages; {kinds['ner']} NER requests, {kinds['triples']} triples requests, "
        f"{kinds['qa']} others; "
        f"passages with entities parsed: {sum(bool(list(e.entities)) for e in ours_ex)}, with triples: "
        f"{sum(bool(list(e.triples)) for e in ours_ex)}",
        f"- request fields besides the messages: harness `{body_fields(ours_req)}`",
    ]


def harness_openie(passages: list[str], prompts: Path | None, url: str, cache: Path):
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.openie import build_extractor
    from hipporag.llm.backends import build_llm

    os.environ["OPENAI_API_KEY"] = "sk-local"
    s = load_settings(
        compose(
            "extractor=llm",
            "llm=openai",
            f"llm.base_url={url}",
            f"llm.model={MODEL}",
            f"llm.identity=recording-{uuid.uuid4().hex[:8]}",
            *([f"prompts={prompts}"] if prompts else []),
            "dataset=musique_train",
        )
    )
    llm = build_llm(s.llm, cache)
    extractor = build_extractor(s.extractor, llm, s.prompts)
    found = dict(extractor.stream(passages))
    llm.flush()
    return [found[i] for i in range(len(passages))]


def corpus_texts(data: Path) -> dict[str, str]:
    """{passage id: text} of musique_train as the harness reads it (per_query.parquet keeps ids and snippets)."""
    from hipporag.core.textnorm import passage_id
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings

    dataset = load_dataset(load_settings(compose("dataset=musique_train", f"dataset.data_dir={data}")).dataset)
    return {passage_id(t): t for t in dataset.passage_texts()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", type=Path, help="a checkout of OSU-NLP-Group/HippoRAG (main)")
    ap.add_argument("--official-python", help="the Python of a venv where `import hipporag` is the official one")
    ap.add_argument("--harness-only", action="store_true", help="the harness's side alone (module docstring)")
    ap.add_argument("--limit", type=int, help="the first N questions only (a smoke run)")
    ap.add_argument(
        "--data", type=Path, default=Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    )
    ap.add_argument("--cache", type=Path, default=ROOT / "outputs" / "cache", help="the harness's cache (embeddings)")
    ap.add_argument("--passages", type=int, default=50, help="corpus passages for the OpenIE comparison")
    ap.add_argument("--keep", type=Path, help="keep the logs, prompts and runs in this folder")
    ap.add_argument("--write", action="store_true", help="replace the measured block of reproduce/FIDELITY.md")
    args = ap.parse_args()
    check_official(args.checkout, args.official_python, args.harness_only)
    if args.write and (args.harness_only or args.limit):
        usage_error("--write records the whole comparison: leave out --harness-only and --limit")
    sys.path.insert(0, str(ROOT))
    from hipporag.harness.settings import compose, load_settings
    from hipporag.prompts.__main__ import main as prompts_main

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(args.keep or tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        prompts = tmp / "prompts" if args.checkout else None  # --harness-only without one: the shipped set
        if prompts and prompts_main(["import-official", str(args.checkout), str(prompts)]):
            sys.exit("import-official failed")
        sides = ("ours", "ours_ie") if args.harness_only else ("ours", "theirs", "ours_ie", "theirs_ie")
        servers = {k: Server(tmp / f"{k}.jsonl") for k in sides}
        theirs = {}
        try:
            frame = harness_run(args.data, prompts, servers["ours"].url, args.cache, tmp / "run", args.limit)
            texts = corpus_texts(args.data)
            records = [
                {
                    "id": f"{r.method}:{r.query_id}",
                    "method": r.method,
                    "question": r.question,
                    "docs": [texts[i] for i in list(r.top_passage_ids)[:5]],  # the reader's passages, whole
                    "gold_answers": list(r.gold_answers),
                    "answer": r.answer,
                    "em": float(r.em),
                    "f1": float(r.f1),
                }
                for r in frame.itertuples()
            ]
            (tmp / "queries.json").write_text(json.dumps(records))
            if args.harness_only:
                chosen = (
                    "dataset=musique_train",
                    f"dataset.data_dir={args.data}",
                    *([f"prompts={prompts}"] * bool(prompts)),
                )
                reader_prompt = load_settings(compose(*chosen)).prompts.reader
                reader = harness_reader_block(records, servers["ours"].requests(), reader_prompt)
                passages = list(texts.values())[: args.passages]
                (tmp / "passages.json").write_text(json.dumps(passages))
                ours_ex = harness_openie(passages, prompts, servers["ours_ie"].url, tmp / "ie_cache")
                ie = harness_openie_block(passages, servers["ours_ie"].requests(), ours_ex)
                return print_report(args, "harness side only", reader, ie, len(frame.query_id.unique()))
            theirs = official(
                args.official_python,
                args.checkout,
                ["--input", str(tmp / "queries.json"), "--base-url", servers["theirs"].url, "--dataset", "musique"],
                tmp / "answers.json",
            )
            reader = reader_block(frame, servers["ours"].requests(), theirs, servers["theirs"].requests(), records)
            reader += scoring_block(args, records, tmp)

            passages = list(texts.values())[: args.passages]
            (tmp / "passages.json").write_text(json.dumps(passages))
            ours_ex = harness_openie(passages, prompts, servers["ours_ie"].url, tmp / "ie_cache")
            theirs_ie = official(
                args.official_python,
                args.checkout,
                ["--openie", str(tmp / "passages.json"), "--base-url", servers["theirs_ie"].url],
                tmp / "openie.json",
            )
            ie = openie_block(
                passages, servers["ours_ie"].requests(), servers["theirs_ie"].requests(), ours_ex, theirs_ie
            )
        finally:
            for s in servers.values():
                s.stop()
    commit = (theirs.get("official") or {}).get("commit", "?")
    print_report(args, f"official commit {commit}", reader, ie, len(frame.query_id.unique()))


def print_report(args, side: str, reader: list[str], ie: list[str], questions: int) -> None:
    prompts = "the imported official prompt set" if args.checkout else "the shipped prompt set"
    text = "\n".join(
        [
            f"musique_train, {questions} questions, {side}, {prompts} (`python reproduce/official_messages.py`):",
            "",
            *reader,
            "",
            *ie,
        ]
    )
    print(text)
    if args.write:
        from hipporag.report.blocks import replace_block

        replace_block(ROOT / "reproduce" / "FIDELITY.md", START, END, text)


if __name__ == "__main__":
    main()

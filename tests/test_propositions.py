"""method=proposition: the propositionizer's input and output on fixed strings; the Flan-T5 path on a tiny T5
the test builds and teaches three answers (the published checkpoint is not on this machine); the LLM path on
a scripted OpenAI-compatible server; the cache; and passages scored by their best proposition (or their
joined propositions) against a brute-force reference with the same embedder."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from hipporag.index.propositions import (
    LLMPropositionizer,
    flan_t5_input,
    run_propositions,
    split_passage,
    strict_list,
    tolerant_list,
)


def test_the_input_is_the_propositionizer_readmes_format():
    assert flan_t5_input("Leaning Tower of Pisa\nThe tower leans.") == (
        "Title: Leaning Tower of Pisa. Section: . Content: The tower leans."
    )
    assert split_passage("no title line") == ("", "no title line")
    assert split_passage("Title\nfirst\nsecond") == ("Title", "first\nsecond")


@pytest.mark.parametrize(
    "text, items, error",
    [
        ('["A leans.", " B is tall. ", ""]', ["A leans.", "B is tall."], None),
        ('[ " a b " , " c " ]', ["a b", "c"], None),  # as a word-level decoder joins tokens
        ('["A leans."', [], "not JSON"),  # cut off: unusable, as the README's `except: prop_list = []`
        ('{"propositions": ["A"]}', [], "not a JSON list of strings"),
        ('["A", 3]', [], "not a JSON list of strings"),
    ],
)
def test_the_flan_t5_output_is_read_as_its_readme_reads_it(text, items, error):
    got, why = strict_list(text)
    assert got == items and (why is None if error is None else why.startswith(error))


@pytest.mark.parametrize(
    "text, items",
    [
        ('Here they are:\n```json\n["A leans.", "B is tall."]\n```', ["A leans.", "B is tall."]),
        ('{"propositions": ["A leans."]}', ["A leans."]),
        ('["A leans.", "B is ta', ["A leans.", "B is ta"]),  # truncated: the complete part kept
        ("no list at all", []),
        ("[]", []),
    ],
)
def test_an_llm_answer_is_repaired_but_never_invented(text, items):
    got, error = tolerant_list(text)
    assert got == items and (error is None) == bool(items)


# ------------------------------------------------------------------------------------------ Flan-T5
TITLES = ["punta cana", "higüey", "the province"]
CONTENTS = [
    "punta cana is a resort town in higüey",
    "higüey is a municipality of the province",
    "the province is in the east",
]
PASSAGES = [f"{t}\n{c}" for t, c in zip(TITLES, CONTENTS)]
TOKEN = re.compile(r"</s>|\w+|[^\w\s]")  # the tiny vocabulary's tokens: words, marks, the end


def words_of(text: str) -> str:
    """`text` one token per word or mark, as the tiny word-level tokenizer reads it."""
    return " ".join(TOKEN.findall(text))


TAUGHT = [  # what the tiny model is taught to write; the third is cut short: unusable
    '[ " punta cana is a resort town " , " punta cana is in higüey " ] </s>',
    '[ " higüey is a municipality " , " higüey is in the province " ] </s>',
    '[ " the province is in the east " </s>',
]


@pytest.fixture(scope="module")
def tiny_propositionizer(tmp_path_factory):
    """A 1-layer encoder-decoder (BART: absolute positions learn a short answer by heart in a few steps) over a
    word-level vocabulary, taught (200 Adam steps, seeded) to write TAUGHT for the README-format inputs of
    PASSAGES, saved as a checkpoint folder that `AutoModelForSeq2SeqLM` loads as it loads the Flan-T5 one."""
    from tiny_bart import teach_tiny_bart
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    inputs = [flan_t5_input(p) for p in PASSAGES]
    words = sorted({w for text in inputs + TAUGHT for w in TOKEN.findall(text)} - {"</s>"})
    vocab = ["<s>", "<pad>", "</s>", "<unk>", *words]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="removed")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", pad_token="<pad>", eos_token="</s>", unk_token="<unk>"
    )
    enc = tokenizer([words_of(t) for t in inputs], padding=True, return_tensors="pt")
    labels = tokenizer([words_of(t) for t in TAUGHT], padding=True, return_tensors="pt")["input_ids"]
    labels[labels == tokenizer.pad_token_id] = -100
    return teach_tiny_bart(tokenizer, enc, labels, 200, tmp_path_factory.mktemp("tiny_propositionizer"))


@pytest.mark.slow
def test_the_flan_t5_path_splits_caches_and_counts_an_unusable_answer(tiny_propositionizer, tmp_path, monkeypatch):
    from hipporag.index import propositions as P

    # the tiny vocabulary is word-level: the README's input is given to it one word or mark per token
    monkeypatch.setattr(P, "flan_t5_input", lambda p: words_of(flan_t5_input(p)))
    splitter = P.FlanT5Propositionizer(str(tiny_propositionizer), max_new_tokens=24, generate_batch=2, device="cpu")
    assert splitter.identity["name"] == "flan_t5" and splitter.identity["max_new_tokens"] == 24
    out, stats = run_propositions(PASSAGES, splitter, tmp_path)
    assert [p.items for p in out[:2]] == [
        ["punta cana is a resort town", "punta cana is in higüey"],
        ["higüey is a municipality", "higüey is in the province"],
    ]
    assert out[2].items == [] and out[2].error.startswith("not JSON") and "the province is in the east" in out[2].raw
    assert stats.split == 3 and stats.unusable == 1 and stats.failed_requests == 0
    assert stats.made.llm_requests == 3 and stats.made.input_tokens > 0 and stats.made.output_tokens > 0
    # the unusable answer is stored too (it is reproducible): a second run splits nothing
    again, stats = run_propositions(PASSAGES, splitter, tmp_path)
    assert stats.split == 0 and stats.cached == 3 and stats.unusable == 1
    assert [p.items for p in again] == [p.items for p in out] and stats.made.llm_requests == 3


def test_a_missing_propositionizer_is_one_line_naming_it_and_hf_hub_offline(tmp_path, monkeypatch):
    from hipporag.core.errors import MissingDependencyError
    from hipporag.index.propositions import FLAN_T5, FlanT5Propositionizer

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import huggingface_hub.constants as hc

    monkeypatch.setattr(hc, "HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(
        MissingDependencyError, match=rf"propositionizer model {FLAN_T5} is not in the local .*HF_HUB_OFFLINE"
    ):
        FlanT5Propositionizer(FLAN_T5)


# ------------------------------------------------------------------------------------------ the LLM path
def sentences(messages: list[dict]) -> str:
    """The scripted propositionizer: the passage's sentences, each prefixed with its title."""
    user = messages[-1]["content"]
    title = user.split("\n", 1)[0].removeprefix("Title: ")
    content = user.split("Content: ", 1)[1]
    return json.dumps([f"{title}: {s.strip()}" for s in re.split(r"(?<=[.!?])\s+", content) if s.strip()])


@pytest.fixture
def llm(scripted_server, settings, tmp_path):
    from hipporag.llm.backends import build_llm

    server = scripted_server(answer=sentences)
    s = settings("llm=openai", "llm.model=scripted", f"llm.base_url={server.base_url}", "llm.max_retries=0")
    return server, build_llm(s.llm, tmp_path / "llm")


def test_the_llm_path_asks_once_per_passage_and_never_stores_a_failed_request(llm, tmp_path):
    from hipporag.prompts.loading import shipped

    server, model = llm
    passages = ["Caskey\nCaskey is a town. It lies on the Brindle.", "Orla Dunmore\nOrla Dunmore is a sculptor."]
    server.fail = lambda messages: "Orla" in messages[-1]["content"]
    splitter = LLMPropositionizer(model, shipped())
    out, stats = run_propositions(passages, splitter, tmp_path)
    assert out[0].items == ["Caskey: Caskey is a town.", "Caskey: It lies on the Brindle."]
    assert out[1].transient and stats.failed_requests == 1 and stats.unusable == 0
    server.fail = lambda messages: False
    again, stats = run_propositions(passages, splitter, tmp_path)
    assert stats.split == 1 and again[1].items == ["Orla Dunmore: Orla Dunmore is a sculptor."]
    assert sum(server.completed.values()) == 2  # the stored passage was not asked again
    # another setting is another propositionizer: nothing shared, and its store is not counted as this one's
    other = LLMPropositionizer(model, shipped(), max_new_tokens=64)
    assert other.identity != splitter.identity
    assert run_propositions(passages, other, tmp_path)[1].disk_bytes > 0
    assert run_propositions(passages, splitter, tmp_path)[1].disk_bytes == stats.disk_bytes > 0


@pytest.mark.slow
@pytest.mark.parametrize("unit", ["proposition", "passage"])
def test_passages_are_scored_by_their_best_proposition_or_their_joined_propositions(llm, settings, tmp_path, unit):
    """On the demo corpus with MiniLM: each passage's score is, for `unit=proposition`, the best cosine of the
    question with any of its propositions; for `unit=passage`, the cosine with `title<TAB>its propositions`."""
    from hipporag.data.sources import load_dataset
    from hipporag.index.build import build_index
    from hipporag.index.embed import EmbeddingCache, build_embedder
    from hipporag.index.openie import build_extractor
    from hipporag.retrieval.methods import RetrievalContext

    server, model = llm
    s = settings("method=proposition", "method.propositionizer=llm", f"method.unit={unit}")
    dataset = load_dataset(s.dataset)
    embedder = build_embedder(s.embedder)
    index, _ = build_index(dataset.passage_texts(), build_extractor(s.extractor, None), embedder, s.knobs, tmp_path)
    embeddings = EmbeddingCache(embedder, tmp_path)
    ctx = RetrievalContext(index=index, embeddings=embeddings, knobs=s.knobs, llm=model, cache_dir=tmp_path)
    method = s.method.build()
    queries = dataset.queries[:6]
    rankings = method.retrieve(ctx, queries)
    props = [
        json.loads(sentences([{"content": f"Title: {p.split(chr(10))[0]}\nContent: {p.split(chr(10), 1)[1]}"}]))
        for p in index.passages
    ]
    q = embedder.encode([x.question for x in queries], prefix=embedder.query_prefix("query_to_passage"))
    for qv, ranking in zip(q, rankings):
        if unit == "proposition":
            expected = [max(float(qv @ v) for v in embedder.encode(ps)) for ps in props]
        else:
            joined = [f"{p.split(chr(10))[0]}\t{' '.join(ps)}" for p, ps in zip(index.passages, props)]
            expected = [float(qv @ v) for v in embedder.encode(joined)]
        got = np.empty(len(expected))
        got[ranking.order] = ranking.scores
        assert np.abs(got - np.array(expected)).max() < 1e-5
        assert ranking.diagnostics["passages_without_propositions"] == 0
    assert method.index_cost.what == "propositions" and method.index_cost.made.llm_requests == len(index.passages)
    assert method.index_cost.built == "now"

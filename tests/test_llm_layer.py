"""The LLM layer against a real local OpenAI-compatible server serving SmolLM2, and the other backends."""

import importlib.util
import json

import numpy as np
import pytest
from openai_server import start

from hipporag.data.dataset import Query
from hipporag.index.openie import run_openie
from hipporag.index.openie.llm_extractor import LLMExtractor
from hipporag.llm.cached import CachedLLM
from hipporag.llm.openai_chat import OpenAIChatLLM
from hipporag.llm.reader import read
from hipporag.llm.transformers_chat import TransformersChatLLM
from hipporag.retrieval.recognition import (
    load_dspy_prompt,
    parse_fact_list,
    recognition_filter,
    snap_to_candidates,
)

pytestmark = pytest.mark.slow  # runs the command line or loads models: `pytest -m 'not slow'` skips it

PASSAGES = [
    "Ilse Varga\nIlse Varga was a glassmaker. She was born in Saltmarsh in 1838.",
    "Alder Glassworks\nAlder Glassworks is a glass factory in Port Alder. It was founded by Ilse Varga.",
    "Saltmarsh\nSaltmarsh is a market town on the eastern coast of Kestrel Island.",
]


@pytest.fixture(scope="module")
def server():
    srv, models = start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/v1", models
    srv.shutdown()


def client(base_url, tmp_path, **kw):
    return CachedLLM(
        OpenAIChatLLM(model="smollm2", base_url=base_url, max_retries=kw.pop("max_retries", 3), **kw), tmp_path
    )


TOKENS = 24


def test_openai_client_end_to_end_with_cache(server, tmp_path, settings):
    base_url, models = server
    llm = client(base_url, tmp_path)
    # short answers (SmolLM2 on 2 cores): what is checked is the way there and back, and the cache, not the triples
    extractor = LLMExtractor(llm, max_new_tokens=TOKENS)
    results, stats = run_openie(PASSAGES, extractor, tmp_path)
    assert stats.extracted == 3
    for r in results:  # every passage either yields triples or records why not, with the raw response
        assert r.triples or (r.error and r.raw)
        assert all(len(t) == 3 for t in r.triples)
    after_openie = models.requests
    assert after_openie == 6  # NER + triples per passage

    queries = [Query(id="q1", question="Where was the founder of Alder Glassworks born?", gold_answers=["Saltmarsh"])]
    candidates = [
        [
            ("alder glassworks", "founded by", "ilse varga"),
            ("ilse varga", "born in", "saltmarsh"),
            ("saltmarsh", "is", "market town"),
        ]
    ]
    s = settings(f"filter_max_new_tokens={TOKENS}", f"reader.max_new_tokens={TOKENS}")
    [kept] = recognition_filter("llm", queries, candidates, llm, s.knobs)
    assert kept.error or set(kept.facts) <= set(candidates[0])
    raw, answers, errors, _ = read(llm, queries, [PASSAGES[:2]], s.prompts.reader, s.reader, stage="reader")
    assert errors == [None]
    assert isinstance(answers[0], str) and raw[0]
    assert models.requests == after_openie + 2
    usage = {stage: vars(u) for stage, u in llm.usage.items()}
    assert usage["openie/ner"]["input_tokens"] > 0 and usage["reader"]["output_tokens"] > 0

    # the same requests again: all from the cache, the server sees nothing
    llm2 = client(base_url, tmp_path)
    run_openie(PASSAGES, LLMExtractor(llm2, max_new_tokens=TOKENS), tmp_path / "other-openie-cache")
    recognition_filter("llm", queries, candidates, llm2, s.knobs)
    read(llm2, queries, [PASSAGES[:2]], s.prompts.reader, s.reader, stage="reader")
    assert models.requests == after_openie + 2
    assert all(u.cache_hits == u.calls for u in llm2.usage.values())


def test_transient_errors_are_retried(server, tmp_path):
    base_url, models = server
    models.fail_next = 2
    before = models.requests
    llm = client(base_url, tmp_path, max_retries=3)
    [g] = llm.generate([[{"role": "user", "content": "Say hi."}]], stage="t", max_new_tokens=8)
    assert g.error is None and g.text
    assert models.requests - before == 3 and llm.usage["t"].errors == 0


def test_persistent_failure_is_counted_and_not_cached(server, tmp_path):
    base_url, models = server
    models.fail_next = 4
    llm = client(base_url, tmp_path, max_retries=1)
    conv = [[{"role": "user", "content": "Say hello."}]]
    [g] = llm.generate(conv, stage="t", max_new_tokens=8)
    assert g.error and "503" in g.error or "InternalServerError" in (g.error or "")
    assert llm.usage["t"].errors == 1
    models.fail_next = 0
    [g2] = llm.generate(conv, stage="t", max_new_tokens=8)
    assert g2.error is None and not g2.cached  # the failure was not cached: asked again


def test_unreachable_or_refusing_endpoints_stop_before_any_request(server, tmp_path, monkeypatch):
    from hipporag.core.errors import EndpointUnreachableError, LLMUnreachableError
    from hipporag.index.embed import OpenAIEmbedder

    base_url, models = server
    dead = client("http://127.0.0.1:9/v1", tmp_path, max_retries=0)
    with pytest.raises(LLMUnreachableError, match=r"LLM 'smollm2' at http://127.0.0.1:9/v1 is unreachable"):
        dead.generate([[{"role": "user", "content": "Say hi."}]], stage="t")
    assert "t" not in dead.usage or dead.usage["t"].errors == 0  # stopped before sending anything
    models.api_key = "the-right-key"
    try:
        monkeypatch.setenv("OPENAI_API_KEY", "a-wrong-key")
        before = models.requests
        with pytest.raises(LLMUnreachableError, match="refused our credentials"):
            client(base_url, tmp_path / "other", max_retries=0).generate(
                [[{"role": "user", "content": "Hi"}]], stage="t"
            )
        assert models.requests == before  # the refusal came from the model list, no chat request was made
        with pytest.raises(EndpointUnreachableError, match="embedder 'all-MiniLM-L6-v2' at .* AuthenticationError"):
            OpenAIEmbedder(model="all-MiniLM-L6-v2", base_url=base_url, max_retries=0).encode(["x"])
    finally:
        models.api_key = None
    with pytest.raises(EndpointUnreachableError, match="APIConnectionError"):
        OpenAIEmbedder(model="m", base_url="http://127.0.0.1:9/v1", max_retries=0).encode(["x"])


def test_openai_embedder_honours_base_url(server):
    base_url, _ = server
    from hipporag.index.embed import OpenAIEmbedder, SentenceTransformerEmbedder

    remote = OpenAIEmbedder(model="all-MiniLM-L6-v2", base_url=base_url, batch_size=2)
    local = SentenceTransformerEmbedder(device="cpu")
    texts = ["Port Alder", "a glass factory", "Kestrel Island"]
    a, b = remote.encode(texts), local.encode(texts)
    assert a.shape == b.shape and np.allclose((a * b).sum(axis=1), 1.0, atol=1e-4)
    # cached by what is served, not where: another address shares the vectors, another identity does not
    elsewhere = OpenAIEmbedder(model="all-MiniLM-L6-v2", base_url="http://127.0.0.1:9/v1")
    assert remote.base_url == base_url and remote.identity == elsewhere.identity and "base_url" not in remote.identity
    assert (
        OpenAIEmbedder(model="all-MiniLM-L6-v2", base_url=base_url, identity="fine-tuned").identity != remote.identity
    )


def test_api_key_only_from_environment(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match=r"needs an API key in \$OPENAI_API_KEY"):
        OpenAIChatLLM(model="gpt-4o-mini")
    monkeypatch.setenv("MY_KEY", "sk-abc")
    llm = OpenAIChatLLM(model="gpt-4o-mini", api_key_env="MY_KEY")
    assert "sk-abc" not in json.dumps(llm.identity)


def test_a_greedy_answer_does_not_depend_on_its_batch_mates():
    """batch_invariant (conf/llm/smollm2.yaml): a real musique_train reader prompt gets the same answer alone
    and in a batch of 8 prompts of mixed lengths (1 to 5 passages)."""
    from cli import DATA

    from hipporag.data.sources import load_dataset
    from hipporag.harness.settings import compose, load_settings

    if not (DATA / "musique_train").is_dir():
        pytest.skip(f"benchmark data not found under {DATA}")
    s = load_settings(compose("dataset=musique_train", f"dataset.data_dir={DATA}"))
    assert s.llm.options.batch_invariant is True
    ds = load_dataset(s.dataset)
    texts = ds.passage_texts()
    convs = [
        s.prompts.reader.messages(q.question, texts[7 * i : 7 * i + 1 + i % 5]) for i, q in enumerate(ds.queries[:8])
    ]
    llm = TransformersChatLLM(
        "smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", batch_size=8, batch_invariant=True
    )
    together = llm.generate(convs, max_new_tokens=16)
    [alone] = llm.generate([convs[2]], max_new_tokens=16)  # one of them again, alone (3 passages)
    assert alone.text == together[2].text and alone.output_tokens == together[2].output_tokens > 0
    assert len({len(c[-1]["content"]) for c in convs}) == 8  # eight different lengths


def test_a_gguf_checkpoint_is_converted_once_and_loads_as_the_same_tensors(tmp_path, monkeypatch, caplog):
    """llm.gguf_cache: the first load converts SmolLM2's GGUF file and keeps the folder; the next reads it, with
    the same tensors bit for bit and the same chat template; a folder with one byte changed is converted again,
    never used; a load that finds another process converting waits for it and reads its folder."""
    import logging
    import threading

    import torch
    from filelock import FileLock

    from hipporag.llm import gguf_cache
    from hipporag.llm.transformers_chat import SMOLLM2_GGUF, smollm2_dir

    monkeypatch.setenv("HIPPORAG_MODEL_CACHE", str(tmp_path))
    caplog.set_level(logging.INFO, logger=gguf_cache.__name__)
    load = lambda: gguf_cache.load(str(smollm2_dir()), SMOLLM2_GGUF, torch.float32)  # noqa: E731
    tok, converted = load()
    [folder] = [p for p in tmp_path.iterdir() if p.is_dir()]
    tok2, loaded = load()
    assert "converting" not in caplog.text

    def same(a, b) -> bool:
        x, y = a.state_dict(), b.state_dict()
        return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)

    assert same(converted, loaded) and loaded.config.tie_word_embeddings == converted.config.tie_word_embeddings
    messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Name a colour."}]
    template = lambda t: t.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)  # noqa: E731
    assert template(tok) == template(tok2) and tok.eos_token == tok2.eos_token
    weights = folder / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    _, healed = load()
    assert "converted checkpoint damaged or incomplete" in caplog.text
    assert same(converted, healed) and gguf_cache._intact(folder)
    assert sorted(tmp_path.iterdir()) == [folder, tmp_path / f"{folder.name}.lock"]
    # another process converting: its lock is held and the folder not yet written
    folder.rename(tmp_path / "elsewhere")
    caplog.clear()
    lock = FileLock(str(folder) + ".lock")
    lock.acquire()
    waiting: dict = {}
    waiter = threading.Thread(target=lambda: waiting.update(loaded=load()), daemon=True)
    waiter.start()
    waiter.join(1.0)
    assert waiter.is_alive() and "loaded" not in waiting  # it waits on the lock (a conversion takes ~15 s)
    (tmp_path / "elsewhere").rename(folder)  # the other process's conversion, published
    lock.release()
    waiter.join(60)
    assert same(converted, waiting["loaded"][1]) and "Converted" not in caplog.text  # read, not converted again
    assert "is being converted by another process; waiting for it" in caplog.text


def test_transformers_backend_on_the_gguf_model():
    llm = TransformersChatLLM(model="smollm2", gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf", batch_size=2)
    out = llm.generate(
        [
            [{"role": "user", "content": "What is the capital of France? One word."}],
            [{"role": "user", "content": "Name a colour."}],
        ],
        max_new_tokens=12,
    )
    assert len(out) == 2 and all(g.text and g.output_tokens > 0 and g.input_tokens > 0 for g in out)


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None, reason="vLLM is not installed (optional extra [vllm], needs a GPU)"
)
def test_vllm_backend():  # pragma: no cover - runs only where vLLM is installed
    from hipporag.llm.vllm_chat import VLLMChatLLM

    llm = VLLMChatLLM(model="HuggingFaceTB/SmolLM2-135M-Instruct", gpu_memory_utilization=0.3)
    [g] = llm.generate([[{"role": "user", "content": "Say hi."}]], max_new_tokens=8)
    assert g.text and g.output_tokens > 0


def test_vllm_missing_is_a_clear_error():
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed")
    from hipporag.llm.vllm_chat import VLLMChatLLM

    with pytest.raises(RuntimeError, match=r"pip install 'hipporag-harness\[vllm\]'"):
        VLLMChatLLM(model="x")


def test_dspy_prompt_file_and_official_snapping(tmp_path):
    saved = {
        "prog": {
            "system": "Pick the facts that answer the question.",
            "demos": [
                {
                    "question": "Where was Ada born?",
                    "fact_before_filter": json.dumps({"fact": [["ada", "born in", "marlow"], ["bo", "is", "cat"]]}),
                    "fact_after_filter": json.dumps({"fact": [["ada", "born in", "marlow"]]}),
                }
            ],
        }
    }
    path = tmp_path / "filter.json"
    path.write_text(json.dumps(saved))
    messages = load_dspy_prompt(str(path))
    assert messages[0] == {"role": "system", "content": "Pick the facts that answer the question."}
    assert "[[ ## fact_before_filter ## ]]" in messages[1]["content"] and messages[2]["role"] == "assistant"
    response = '[[ ## fact_after_filter ## ]]\n{"fact": [["marlow", "lies on", "elm"], ["ada", "born", "marlow"]]}\n\n[[ ## completed ## ]]'
    facts = parse_fact_list(response)
    cands = [("ada", "born in", "marlow"), ("marlow", "lies on", "river elm"), ("x", "y", "z")]
    # snapped in the order returned (official), to the closest candidate
    assert snap_to_candidates(facts, cands, cutoff=0.0) == [cands[1], cands[0]]
    assert snap_to_candidates(facts, cands, cutoff=0.0, limit=1) == [cands[1]]
    with pytest.raises(ValueError, match="not a DSPy-saved filter prompt"):
        bad = tmp_path / "bad.json"
        bad.write_text("{}")
        load_dspy_prompt(str(bad))

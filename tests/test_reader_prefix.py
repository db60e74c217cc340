"""`llm.prefix_cache` (conf/llm/smollm2.yaml): the KV of a prompt's messages before the last is computed once and
continued from; an answer stays a function of its own messages, and the option is part of the cache identity."""

import pytest

from hipporag.data.sources import load_dataset
from hipporag.harness.settings import compose, load_settings
from hipporag.llm.transformers_chat import SMOLLM2_GGUF, TransformersChatLLM


def test_prefix_cache_is_shipped_on_and_part_of_the_identity():
    s = load_settings(compose())
    assert s.llm.options.prefix_cache is True and s.llm.options.batch_invariant is True
    on = s.llm.build()
    off = load_settings(compose("llm.prefix_cache=false")).llm.build()
    assert on.identity["prefix_cache"] is True and "prefix_cache" not in off.identity
    assert {k: v for k, v in on.identity.items() if k != "prefix_cache"} == off.identity
    # without batch_invariant prompts are batched, the prefix is not used, and the identity does not say it is
    batched = TransformersChatLLM("smollm2", gguf_file=SMOLLM2_GGUF, batch_invariant=False, prefix_cache=True)
    assert "prefix_cache" not in batched.identity


@pytest.mark.slow  # loads SmolLM2
def test_an_answer_from_the_prefix_cache_does_not_depend_on_its_batch_mates():
    s = load_settings(compose())
    ds = load_dataset(s.dataset)
    texts = ds.passage_texts()
    convs = [s.prompts.reader.messages(q.question, texts[3 * i : 3 * i + 1 + i]) for i, q in enumerate(ds.queries[:3])]
    llm = TransformersChatLLM("smollm2", gguf_file=SMOLLM2_GGUF, batch_invariant=True, prefix_cache=True)
    answer = lambda cs: [g.text for g in llm.generate(cs, max_new_tokens=10)]  # noqa: E731
    together = answer(convs)
    assert len(llm._prefixes) == 1  # one prompt role, one shared prefix
    assert answer(convs[::-1]) == together[::-1] and answer([convs[1]]) == [together[1]]
    assert all(together) and len({len(c[-1]["content"]) for c in convs}) == 3  # three different prompts
    # one message: no prefix to share, the whole prompt is computed
    [alone] = answer([[{"role": "user", "content": "Name a colour."}]])
    assert alone and len(llm._prefixes) == 1
    # and the same answers as the whole prompt computed each time (40/40 on the demo: bench_reader_prefix.py)
    llm.prefix_cache = False
    assert answer(convs) == together

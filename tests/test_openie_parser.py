"""The tolerant OpenIE parser: it repairs the JSON around the lists (known malformations, then a fuzz run over
generated broken outputs), and leaves the items to the one official validity rule."""

import json
import random

import pytest

from hipporag.index.openie.parse import parse_entities, parse_triples

GOOD_TRIPLES = {"triples": [["Ada Brenn", "born in", "Marlow"], ["Marlow", "lies on", "River Elm"]]}
EXPECTED = [["Ada Brenn", "born in", "Marlow"], ["Marlow", "lies on", "River Elm"]]


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(GOOD_TRIPLES),
        "```json\n" + json.dumps(GOOD_TRIPLES) + "\n```",
        "Sure! Here are the triples:\n" + json.dumps(GOOD_TRIPLES) + "\nLet me know if you need more.",
        str(GOOD_TRIPLES),  # Python repr: single quotes
        json.dumps({"result": {"Triples": EXPECTED}}),  # nested, other case
        json.dumps(EXPECTED),  # a bare list
    ],
)
def test_recovers_common_malformations(text):
    r = parse_triples(text)
    assert r.error is None and r.items == EXPECTED


@pytest.mark.parametrize(
    "triples",
    [
        [[t] for t in EXPECTED],  # one nesting level too many
        [{"subject": s, "predicate": p, "object": o} for s, p, o in EXPECTED],
        ["Ada Brenn", "born in", "Marlow"],  # a bare triple of strings
    ],
)
def test_never_repairs_a_triple_as_the_official_rule_does_not(triples):
    r = parse_triples(json.dumps({"triples": triples}))
    assert r.error is None and r.items == [] and r.dropped == len(triples)


def test_truncated_json_keeps_complete_triples():
    text = json.dumps(GOOD_TRIPLES)[:-12]  # cut inside the last triple
    r = parse_triples(text)
    assert r.error is None and r.items[0] == EXPECTED[0]


def test_wrong_lengths_are_dropped_and_counted_other_elements_become_strings():
    r = parse_triples(
        json.dumps(
            {"triples": [["a", "b"], ["a", "b", "c", "d"], ["x", 1902, "y"], [None, "p", "o"], "str", ["", "p", "o"]]}
        )
    )
    assert r.items == [["x", "1902", "y"], ["None", "p", "o"], ["", "p", "o"]] and r.dropped == 3


def test_entities():
    r = parse_entities('{"named_entities": ["Ada", "Marlow", "Ada", 1902, null]}')
    assert r.items == ["Ada", "Marlow", "1902", "None"] and r.dropped == 0
    r = parse_entities("```\n['Ada', ['Marlow']]\n```")
    assert r.items == ["Ada"] and r.dropped == 1
    assert parse_entities("I could not find any entities.").error == "no JSON found in the response"


MUTATIONS = []


def mutation(f):
    MUTATIONS.append(f)
    return f


@mutation
def truncate(s, rng):
    return s[: rng.randrange(len(s) + 1)]


@mutation
def fence(s, rng):
    return f"```{rng.choice(['json', '', 'python'])}\n{s}" + ("\n```" if rng.random() < 0.5 else "")


@mutation
def prose(s, rng):
    return rng.choice(["Here you go: ", "Output:\n", ""]) + s + rng.choice(["", " Hope this helps.", "\n\nNote: done"])


@mutation
def single_quotes(s, rng):
    return s.replace('"', "'")


@mutation
def drop_char(s, rng):
    if not s:
        return s
    i = rng.randrange(len(s))
    return s[:i] + s[i + 1 :]


@mutation
def insert_junk(s, rng):
    i = rng.randrange(len(s) + 1)
    return s[:i] + rng.choice(["]", "[", "{", "}", ",", '"', "'", "\\", ":", "null", "\n"]) + s[i:]


@mutation
def renest(s, rng):
    return rng.choice(["[", '{"x": ', '{"triples": [']) + s + rng.choice(["]", "}", "]}"])


def random_output(rng):
    triples = []
    for _ in range(rng.randrange(0, 6)):
        t = [
            rng.choice(["Ada", "Marlow", "River Elm", "1902", "", "x" * rng.randrange(1, 30)])
            for _ in range(rng.choice([1, 2, 3, 3, 3, 4]))
        ]
        if rng.random() < 0.2:
            t[0] = rng.choice([None, 7, 3.5, True, ["nested"], {"k": "v"}])
        triples.append(t)
    key = rng.choice(["triples", "Triples", "facts", "named_entities"])
    return json.dumps({key: triples})


def test_fuzz_no_exception_escapes_and_every_output_is_recorded():
    rng = random.Random(1234)
    tried = recorded = escaped = 0
    for _ in range(1500):
        text = random_output(rng)
        for _ in range(rng.randrange(1, 4)):
            text = rng.choice(MUTATIONS)(text, rng)
        tried += 1
        try:
            for parse in (parse_triples, parse_entities):
                r = parse(text)
                assert r.error is not None or isinstance(r.items, list)
                assert all(
                    isinstance(t, list) and len(t) == 3 and all(isinstance(x, str) for x in t)
                    for t in (r.items if parse is parse_triples else [])
                )
            recorded += 1
        except AssertionError:
            raise
        except Exception:  # noqa: BLE001 - counting escapes is the point
            escaped += 1
    print(f"fuzz: {tried} outputs tried, {recorded} recorded, {escaped} exceptions escaped")
    assert tried >= 1000 and escaped == 0 and recorded == tried

"""Well-formed answers to the compared libraries' prompts (LightRAG, Microsoft GraphRAG) and the harness's own,
made from the text each request carries, for the scripted OpenAI-compatible server (tests/scripted_server.py).

Each request is recognised by a marker of its prompt; an unrecognised one is answered with a text that no
parser accepts, so a new prompt kind shows as a failing test rather than a silent guess. The answers are
deterministic: the same request always gets the same answer, so a second run is served from the cache.
"""

from __future__ import annotations

import json
import re

from scripted_server import WORD, openie_answer

LIGHTRAG_TD, LIGHTRAG_END = "<|#|>", "<|COMPLETE|>"
STOP = {"The", "A", "An", "In", "It", "He", "She", "They", "This", "That", "What", "Who", "Which", "When", "Where"}


def names(text: str, limit: int = 8) -> list[str]:
    """The capitalised phrases of a text, first occurrence first (the scripted 'entities')."""
    return [n for n in dict.fromkeys(WORD.findall(text)) if n not in STOP][:limit]


def between(text: str, start: str, end: str) -> str:
    """The text after the last `start` (a prompt names its sections in its instructions first), up to `end`."""
    i = text.rindex(start) + len(start)
    j = text.find(end, i)
    return text[i : j if j >= 0 else len(text)]


def lightrag_extraction(text: str) -> str:
    found = names(text)
    rows = [f"entity{LIGHTRAG_TD}{n}{LIGHTRAG_TD}concept{LIGHTRAG_TD}{n} appears in: {text[:120]}" for n in found]
    rows += [
        f"relation{LIGHTRAG_TD}{a}{LIGHTRAG_TD}{b}{LIGHTRAG_TD}co-mention{LIGHTRAG_TD}{a} and {b} appear together."
        for a, b in zip(found, found[1:])
    ]
    return "\n".join([*rows, LIGHTRAG_END])


def lightrag_answer(messages: list[dict]) -> str | None:
    """LightRAG 1.5.7's requests; None when the request is not one of its."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = messages[-1]["content"]
    if "Based on the last extraction task" in user:
        return LIGHTRAG_END  # nothing missed
    if "extracting entities and relationships" in system:
        return lightrag_extraction(between(user, "---Input Text---", "---Output---"))
    if "synthesize a list of descriptions" in user:
        return "Summary: " + " ".join(user.split("Description List:", 1)[-1].split()[:30])
    if "keyword extractor" in user:
        query = between(user, "User Query:", "\n\n")
        low = names(query)
        high = re.findall(r"[a-z]{5,}", query.lower())[:3]
        return json.dumps({"high_level_keywords": high, "low_level_keywords": low})
    if "---Context---" in system:
        context = system.split("---Context---", 1)[1]
        chunks = re.findall(r'"content":\s*"((?:[^"\\]|\\.)*)"', context)
        first = names(json.loads(f'"{chunks[0]}"'), 1) if chunks else []
        return f"The answer is {first[0]}." if first else "I do not know."
    return None


GRAPHRAG_TD, GRAPHRAG_END = "<|>", "<|COMPLETE|>"
UPPER = re.compile(r"\b[A-Z][A-Z0-9]+(?: [A-Z][A-Z0-9]+)*\b")  # GraphRAG's entity titles are upper-cased


def graphrag_extraction(prompt: str) -> str:
    types = between(prompt, "Entity_types:", "\n").split(",")
    text = " ".join(between(prompt, "Text:", "######################\nOutput:").split())
    found = names(text)
    kind = types[0].strip().upper() if types else "ENTITY"
    rows = [
        f'("entity"{GRAPHRAG_TD}{n.upper()}{GRAPHRAG_TD}{kind}{GRAPHRAG_TD}{n} appears in: {text[:120]})' for n in found
    ]
    rows += [
        f'("relationship"{GRAPHRAG_TD}{a.upper()}{GRAPHRAG_TD}{b.upper()}{GRAPHRAG_TD}{a} and {b} appear together.'
        f"{GRAPHRAG_TD}5)"
        for a, b in zip(found, found[1:])
    ]
    return "\n##\n".join(rows) + f"\n{GRAPHRAG_END}"


def graphrag_answer(messages: list[dict]) -> str | None:
    """Microsoft GraphRAG 3.3.0's requests; None when the request is not one of its."""
    last = messages[-1]["content"]
    full = "\n".join(m["content"] for m in messages)
    if "MANY entities and relationships were missed in the last extraction" in last:
        return GRAPHRAG_END  # nothing missed
    if "Answer Y if there are still entities or relationships that need to be added" in last:
        return "N"
    if 'Format each entity as ("entity"' in full:
        return graphrag_extraction(full)
    if "generating a comprehensive summary of the data provided below" in full:
        return "Summary: " + " ".join(between(full, "Description List:", "#######").split()[:40])
    if "Write a comprehensive report of a community" in full:
        found = list(dict.fromkeys(UPPER.findall(between(full, "Text:", "The report should include"))))[:5]
        found = [n for n in found if n not in ("ID", "COMMUNITY")] or ["UNKNOWN"]
        findings = [{"summary": f"{n.title()} is a key entity", "explanation": f"{n.title()} is in it."} for n in found]
        report = {
            "title": "Community of " + ", ".join(n.title() for n in found[:3]),
            "summary": "This community contains " + ", ".join(n.title() for n in found) + ".",
            "rating": float(min(10, 2 + len(found))),
            "rating_explanation": f"It has {len(found)} entities.",
            "findings": findings,
        }
        return json.dumps(report)
    if "Generate a response consisting of a list of key points" in full:
        data = between(full, "---Data tables---", "---Goal---")
        rows = re.findall(r"^(\d+)\|([^|\n]*)\|", data, re.M)
        points = [{"description": f"{title} [Data: Reports ({rid})]", "score": 50} for rid, title in rows]
        return json.dumps({"points": points or [{"description": "No data.", "score": 0}]})
    if "synthesizing perspectives from multiple analysts" in full:
        first = names(full.split("----Analyst 1----", 1)[-1], 1) if "----Analyst 1----" in full else []
        return f"The answer is {first[0]}." if first else "I do not know."
    if "You are a helpful agent designed to reason over a knowledge graph" in full:
        query = between(full, "For the query:", "\n\n").strip() or "the question"
        primer = {
            "intermediate_answer": f"# About {query}\nThe reports mention {', '.join(names(query)) or 'nothing'}.",
            "score": 60,
            "follow_up_queries": [f"Who is {n}?" for n in names(query, 2)] or [f"What is known about {query}?"],
        }
        return json.dumps(primer)
    if "Create a hypothetical answer to the following query" in full:
        return "A hypothetical answer: " + between(full, "following query:", "\n").strip()
    if "representing how well the response addresses the overall research question" in full:
        sources = full.split("-----Sources-----", 1)[-1] if "-----Sources-----" in full else ""
        first = names(sources.split("\n", 2)[-1], 1)
        return json.dumps(
            {"response": f"It is {first[0] if first else 'unknown'}.", "score": 70, "follow_up_queries": []}
        )
    if "You are a helpful assistant responding to questions about data in the reports provided." in full:
        first = names(full.split("---Data Reports---", 1)[-1], 1)
        return f"The answer is {first[0]}." if first else "I do not know."
    if 'represent the source id taken from the "id" column' in full or (
        "You are a helpful assistant responding to questions about data in the tables provided." in full
    ):
        marker = "-----Sources-----" if "-----Sources-----" in full else "---Data tables---"
        section = full.split(marker, 1)[-1] if marker in full else ""
        rows = [r for r in re.findall(r"^[^|\n]+\|(.*)$", section, re.M) if r.strip() != "text"]  # after the header
        first = names(rows[0], 1) if rows else []
        return f"The answer is {first[0]}." if first else "I do not know."
    return None


def library_request(messages: list[dict]) -> str | None:
    """The answer to a compared library's request; None when no library sent it."""
    for script in (lightrag_answer, graphrag_answer):
        answer = script(messages)
        if answer is not None:
            return answer
    return None


def library_answer(messages: list[dict]) -> str:
    """An answer for any request a run sends: the libraries', then the harness's (OpenIE, reader)."""
    answer = library_request(messages)
    if answer is not None:
        return answer
    user = messages[-1]["content"]
    if "Question:" in user and ("Thought" in user or "Answer" in user):  # the harness's reader
        return "Answer: " + (names(user.rsplit("Question:", 1)[1], 1) or ["unknown"])[0]
    return openie_answer(messages)

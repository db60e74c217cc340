"""The LLM judge (`metric=llm_judge`): each answer graded yes or no against the gold answers by an LLM.

Why: EM and F1 count "the river Brindle" wrong for "Brindle River"; a judge is the usual complement, and its
agreement with EM and F1 (`eval.metrics.judge_agreement`) says how far the two can be trusted together. The
messages are the prompt set's `judge` role; the requests go through the response cache as the reader's do
(stage `judge/<method>`), at temperature 0 whatever the reader's sampling, so a rerun asks nothing again. A
failed request and a verdict that is neither yes nor no are counted (the run's failures and unusable answers,
per stage) and score 0, never guessed; an empty answer is wrong without asking.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hipporag.prompts.prompt_set import Prompt

VERDICT = re.compile(r"\b(yes|no|correct|incorrect)\b", re.IGNORECASE)
GOLD_SEPARATOR = " | "


def verdict(response: str) -> float | None:
    """1.0 for yes / correct, 0.0 for no / incorrect (the first of them in the response), None for neither."""
    found = VERDICT.search(response or "")
    if found is None:
        return None
    return 1.0 if found.group(1).lower() in ("yes", "correct") else 0.0


@dataclass
class Verdicts:
    """The judge's grade of each answer (1 or 0), its raw response (None where it was not asked), its request
    error, whether its verdict was unusable, and the responses themselves (what each cost)."""

    scores: list[float]
    raw: list[str | None]
    errors: list[str | None]
    unusable: list[bool]
    responses: list

    def grade(self, i: int) -> float | None:
        """Answer i's grade as the judge gave it; None where it gave none (not asked, failed, unusable)."""
        return None if self.raw[i] is None or self.errors[i] or self.unusable[i] else self.scores[i]


def judge(
    llm, questions: list[str], golds: list[list[str]], answers: list[str], prompt: Prompt, max_new_tokens: int, stage
) -> Verdicts:
    """Every non-empty answer graded by `llm` with `prompt` (the judge role), in one batch through the cache."""
    asked = [i for i, a in enumerate(answers) if a and a.strip()]
    conversations = [
        prompt.render(question=questions[i], gold_answers=GOLD_SEPARATOR.join(golds[i]), answer=answers[i])
        for i in asked
    ]
    responses = (
        llm.generate(conversations, stage=stage, max_new_tokens=max_new_tokens, temperature=0.0) if asked else []
    )
    n = len(answers)
    out = Verdicts([0.0] * n, [None] * n, [None] * n, [False] * n, responses)
    for i, r in zip(asked, responses):
        out.raw[i], out.errors[i] = r.text, r.error
        if r.error is None:
            v = verdict(r.text)
            out.unusable[i] = v is None
            out.scores[i] = v or 0.0
    if conversations:
        llm.usage[stage].unusable += sum(out.unusable)  # counted per stage as the filter's: summary.unusable_answers
    return out

"""A REBEL-shaped checkpoint small enough to build in a test: a 1-layer BART over a 21-word vocabulary whose
tokenizer has REBEL's tags, taught three tagged answers (REBEL's own weights are not on this machine). Shared
by tests/test_rebel.py and the extractor contract (tests/test_part_contracts.py) through conftest's
`tiny_rebel`."""

from __future__ import annotations

from pathlib import Path

WORDS = [
    "punta",
    "cana",
    "is",
    "a",
    "resort",
    "town",
    "in",
    "the",
    "municipality",
    "of",
    "higüey",
    "province",
    "located",
    "entity",
]
PASSAGES = [
    "punta cana is a resort town",
    "higüey is a municipality in the province",
    "punta cana is a resort town in the municipality of higüey in the province located in the entity",  # 18 words
]
TAGGED = [  # what the tiny model is taught to write for each passage (the third read to its first 12 words)
    "<s><triplet> punta cana <subj> town <obj> is a</s>",
    "<s><triplet> higüey <subj> province <obj> located in <subj> municipality <obj> is a</s>",
    "<s><triplet> punta cana <subj> higüey <obj> located in</s>",
]
TRIPLES = [
    [["punta cana", "is a", "town"]],
    [["higüey", "located in", "province"], ["higüey", "is a", "municipality"]],
    [["punta cana", "located in", "higüey"]],
]


def build_tiny_rebel(folder: Path) -> Path:
    """A 1-layer BART over a 21-word vocabulary whose tokenizer has REBEL's tags, taught (150 Adam steps,
    seeded) to write TAGGED for PASSAGES, saved as a checkpoint folder: generation, decoding and parsing
    then have a known answer."""
    from tiny_bart import teach_tiny_bart
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = ["<s>", "<pad>", "</s>", "<unk>", "<triplet>", "<subj>", "<obj>", *WORDS]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(vocab)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        additional_special_tokens=["<triplet>", "<subj>", "<obj>"],
    )
    inputs = tokenizer(PASSAGES, padding=True, max_length=12, truncation=True, return_tensors="pt")
    labels = tokenizer(TAGGED, padding=True, add_special_tokens=False, return_tensors="pt")["input_ids"]
    labels[labels == tokenizer.pad_token_id] = -100
    return teach_tiny_bart(tokenizer, inputs, labels, 150, folder)

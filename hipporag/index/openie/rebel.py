"""REBEL as an OpenIE extractor (`extractor=rebel`): the v1 paper's Table 5 row, through transformers.

REBEL (Babelscape/rebel-large, a BART model fine-tuned for relation extraction) reads a passage and writes
its relations as one tagged string, `<triplet> head <subj> tail <obj> relation`, where one head may be
followed by several `<subj> tail <obj> relation` groups. `parse_tagged` turns that string into
(head, relation, tail) triples; they then pass through the same validity rule as every extractor's.

REBEL has no NER step. A passage's entities are the heads and tails of its triples, in first-seen order:
the graph's entity nodes are exactly the phrases its facts name (reproduce/EXTRACTORS.md). The official
legacy code ships REBEL's graphs but not the code that made them, so generation follows the model card
(beam search of 3, length penalty 0, 256 tokens in and out) and keeps the best beam (`sequences: 1`),
or the union of the first `sequences` beams.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from hipporag.cache.keys import folder_digest
from hipporag.core.device import pick_device
from hipporag.core.errors import SettingError
from hipporag.core.weights import check_weights, load_checkpoint, looks_local
from hipporag.index.openie.extraction import Extraction
from hipporag.index.openie.validity import valid_triples

log = logging.getLogger(__name__)

PARSER_VERSION = 1  # bump when parse_tagged changes what it returns: it is in the OpenIE cache key
TRIPLET, SUBJ, OBJ = "<triplet>", "<subj>", "<obj>"
WRAPPERS = ("<s>", "</s>", "<pad>")  # the decoder's own markers around the tagged string


def parse_tagged(text: str) -> list[list[str]]:
    """(head, relation, tail) triples from REBEL's tagged output, in order; words are joined by single
    spaces. A group missing its head, tail or relation is dropped, never guessed."""
    for marker in WRAPPERS:
        text = text.replace(marker, " ")
    triples: list[list[str]] = []
    head: list[str] = []
    tail: list[str] = []
    relation: list[str] = []
    part = None  # which of the three the next words belong to

    def close() -> None:
        if head and tail and relation:
            triples.append([" ".join(head), " ".join(relation), " ".join(tail)])

    for word in text.split():
        if word == TRIPLET:
            close()
            head, tail, relation = [], [], []
            part = head
        elif word == SUBJ:
            close()
            tail, relation = [], []
            part = tail
        elif word == OBJ:
            relation = []
            part = relation
        elif part is not None:
            part.append(word)
    close()
    return triples


def entities_of(triples: list[list[str]]) -> list[str]:
    """The heads and tails of the triples, each once, in first-seen order."""
    return list(dict.fromkeys(phrase for h, _, t in triples for phrase in (h, t)))


@dataclass(frozen=True)
class Generation:
    """How REBEL decodes: the model card's settings by default."""

    max_input_tokens: int = 256  # the passage is read this far (the tokenizer truncates)
    max_output_tokens: int = 256  # the decoder's max_length
    num_beams: int = 3
    length_penalty: float = 0.0
    sequences: int = 1  # beams whose triples are kept (their union); at most num_beams


class RebelExtractor:
    """Triples from a REBEL checkpoint (a hub id or a local folder), a batch of passages per generate call."""

    def __init__(
        self,
        model: str = "Babelscape/rebel-large",
        revision: str | None = None,
        generation: Generation = Generation(),
        batch_size: int = 64,
        generate_batch: int = 8,
        device: str = "auto",
    ):
        if generation.sequences > generation.num_beams:
            raise SettingError(
                f"extractor.sequences={generation.sequences}: at most extractor.num_beams ({generation.num_beams})"
            )
        check_weights(model, "REBEL model", revision)  # one line, before any work, when the weights cannot load
        import transformers
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        self.model_source, self.generation = model, generation
        self.batch_size, self.generate_batch = batch_size, generate_batch
        self.device = pick_device(device)
        self.tokenizer = load_checkpoint(
            lambda: AutoTokenizer.from_pretrained(model, revision=revision), model, "extractor.model"
        )
        self.model = load_checkpoint(
            lambda: AutoModelForSeq2SeqLM.from_pretrained(model, revision=revision), model, "extractor.model"
        )
        self.model = self.model.to(self.device).eval()
        missing = [t for t in (TRIPLET, SUBJ, OBJ) if t not in self.tokenizer.get_vocab()]
        if missing:
            raise SettingError(
                f"extractor.model={model}: not a REBEL checkpoint, its tokenizer lacks {', '.join(missing)}"
            )
        self.truncated = 0  # passages longer than max_input_tokens, over this extractor's life
        self.identity = {
            "name": "rebel",
            "model": model,
            "revision": revision or getattr(self.model.config, "_commit_hash", None),
            # a local folder's files by digest (weights, tokenizer, configs): edited under its name, another identity
            "files": folder_digest(Path(model)) if looks_local(model) else None,
            "generation": vars(generation),
            "transformers": transformers.__version__,
            "parser": PARSER_VERSION,
        }

    def extract(self, passages: list[str]) -> list[Extraction]:
        out: list[Extraction] = []
        for start in range(0, len(passages), self.generate_batch):
            out += self._generate(passages[start : start + self.generate_batch])
        return out

    def _generate(self, passages: list[str]) -> list[Extraction]:
        import torch

        g = self.generation
        # a model has as many positions as it has, whatever the knobs ask: past them its position embedding fails
        # with an IndexError (an answer that never ends, a long passage); the checkpoint's limit bounds both
        positions = getattr(self.model.config, "max_position_embeddings", None) or max(
            g.max_input_tokens, g.max_output_tokens
        )
        max_in, max_out = min(g.max_input_tokens, positions), min(g.max_output_tokens, positions)
        lengths = [len(ids) for ids in self.tokenizer(passages, truncation=False)["input_ids"]]
        cut = sum(n > max_in for n in lengths)
        if cut:
            self.truncated += cut
            log.warning(
                "REBEL: %d of %d passages are longer than %d tokens and are read only that far (extractor.max_input_tokens"
                ", or the checkpoint's %d positions)",
                cut,
                len(passages),
                max_in,
                positions,
            )
        inputs = self.tokenizer(passages, max_length=max_in, truncation=True, padding=True, return_tensors="pt").to(
            self.device
        )
        with torch.inference_mode():
            generated = self.model.generate(
                **inputs,
                max_length=max_out,
                num_beams=g.num_beams,
                length_penalty=g.length_penalty,
                num_return_sequences=g.sequences,
            )  # the rest (early stopping, n-gram blocking, ...) from the checkpoint's generation config, as the card
        texts = self.tokenizer.batch_decode(generated, skip_special_tokens=False)
        out = []
        for i in range(len(passages)):
            beams = texts[i * g.sequences : (i + 1) * g.sequences]
            triples = valid_triples([t for beam in beams for t in parse_tagged(beam)])
            out.append(
                Extraction(
                    entities=entities_of(triples),
                    triples=triples,
                    raw="\n".join(beams),
                )
            )
        return out

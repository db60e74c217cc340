"""A 1-layer BART small enough to teach a few answers by heart in a test (absolute positions learn a short
answer in a few hundred steps), for the checkpoints tests build where the real weights are not on this machine:
REBEL's (tests/tiny_rebel.py) and the propositionizer's (tests/test_propositions.py)."""

from __future__ import annotations

from pathlib import Path


def teach_tiny_bart(tokenizer, inputs, labels, steps: int, folder: Path) -> Path:
    """A seeded 1-layer BART over `tokenizer`'s vocabulary (ids: <s> 0, <pad> 1, </s> 2), taught `steps` Adam
    steps to write `labels` (padding already -100) for the encoded `inputs`, saved with its tokenizer."""
    import torch
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=len(tokenizer.get_vocab()),
        d_model=32,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=64,
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_eos_token_id=2,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
    )
    model = BartForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-2)
    for _ in range(steps):
        loss = model(**inputs, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    folder.mkdir(parents=True, exist_ok=True)
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder

"""A small random Hugging Face MarianMTModel, saved the way OPUS-MT models are published.

Real sentencepiece models (source.spm, target.spm) trained here on the synthetic corpus, a joint
vocab.json in Marian's order (</s> 0, <unk> 1, the pieces, <pad> last), swish activation, and
`save_pretrained` of transformers' own MarianMTModel and MarianTokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import random

from corpus import sentence_pair


def write_marian_model(out: Path, seed: int = 0, d_model: int = 32, layers: int = 2, train_steps: int = 300) -> Path:
    import sentencepiece as spm
    import torch
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pairs = [sentence_pair(rng) for _ in range(600)]
    spms = {}
    for side, name in ((0, "source"), (1, "target")):
        text = out / f"{name}.txt"
        text.write_text("\n".join(p[side] for p in pairs) + "\n")
        spm.SentencePieceTrainer.train(
            input=str(text), model_prefix=str(out / name), vocab_size=70, model_type="unigram",
            character_coverage=1.0, bos_id=-1, eos_id=1, unk_id=0, pad_id=-1, minloglevel=2,
        )
        (out / f"{name}.model").rename(out / f"{name}.spm")
        (out / f"{name}.vocab").unlink()
        text.unlink()
        spms[name] = spm.SentencePieceProcessor(model_file=str(out / f"{name}.spm"))
    vocab = {"</s>": 0, "<unk>": 1}
    for sp in spms.values():
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if not sp.is_control(i) and not sp.is_unknown(i) and piece not in vocab:
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1))
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab), d_model=d_model, encoder_layers=layers, decoder_layers=layers,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
        activation_function="swish", max_position_embeddings=128, pad_token_id=pad, eos_token_id=0,
        decoder_start_token_id=pad, forced_eos_token_id=0, scale_embedding=True, share_encoder_decoder_embeddings=True,
    )
    torch.manual_seed(seed)
    model = MarianMTModel(config)
    tokenizer = MarianTokenizer(str(out / "source.spm"), str(out / "target.spm"), str(out / "vocab.json"), source_lang="en", target_lang="de")
    # A fresh random model emits one token over and over whatever the input; a few steps of training
    # make its outputs depend on the input and end at different lengths, so equal outputs mean something.
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains many times faster on one thread than on a busy machine's all
    try:
        _train(model, tokenizer, optimizer, pairs, pad, train_steps)
    finally:
        torch.set_num_threads(threads)
    model.eval()
    with torch.no_grad():  # Marian's logits bias is a buffer, not trained; give it values the import must carry
        model.final_logits_bias.normal_(0.0, 0.1)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def _train(model, tokenizer, optimizer, pairs, pad: int, steps: int) -> None:
    for step in range(steps):
        batch = pairs[(step * 32) % len(pairs):][:32]
        enc = tokenizer([s for s, _ in batch], text_target=[t for _, t in batch], return_tensors="pt", padding=True)
        enc["labels"][enc["labels"] == pad] = -100
        model(**enc).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def import_with_fault(source: str, out: str, fault: str) -> None:
    """`import_marian(source, out)` under NMT_TEST_FAULT=`fault`: the target of the crash test's child processes."""
    import os

    from nmtcli.interop.marian import import_marian

    os.environ["NMT_TEST_FAULT"] = fault
    import_marian(source, out)

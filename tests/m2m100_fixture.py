"""Small random M2M100ForConditionalGeneration models, saved the way M2M-100 and NLLB-200 are published.

One architecture (transformers' M2M100, which NLLB-200's dense models use too), two tokenizers:
- "m2m100": M2M100Tokenizer's files, vocab.json (piece -> id) beside sentencepiece.bpe.model; the 100 language
  tags `__en__` ... follow the vocabulary, then 8 made-up words. Source `__en__ text </s>`.
- "nllb": NllbTokenizer's files (tokenizer.json, tokenizer_config.json) and sentencepiece.bpe.model; ids are
  fairseq's (<s> 0, <pad> 1, </s> 2, <unk> 3, piece i at i + 1), the language codes (`eng_Latn`) added after
  them. Source `eng_Latn text </s>`.
Both decode from </s> with the target language's tag forced first. A real sentencepiece model (BPE, as both
use) is trained here on the synthetic corpus, and one model is trained a few steps on en->de so its outputs
depend on the input and on the target tag; the NLLB one is the same model under NLLB's ids.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

from corpus import sentence_pair

NLLB_CODES = {"eng_Latn": "en", "deu_Latn": "de", "fra_Latn": "fr", "spa_Latn": "es", "zho_Hans": "zh", "arb_Arab": "ar"}  # -> M2M-100's


def write_m2m100_models(root: Path, seed: int = 0, d_model: int = 32, layers: int = 2, train_steps: int = 60) -> dict[str, Path]:
    """root/m2m100 and root/nllb: one model trained here, saved with each tokenizer (NLLB's embedding rows taken from
    the M2M-100 model's: the same pieces, each NLLB code's row that of its M2M-100 tag). Returns {kind: dir}."""
    import sentencepiece as spm
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    dirs = {kind: root / kind for kind in ("m2m100", "nllb")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pairs = [sentence_pair(rng) for _ in range(600)]
    text = root / "corpus.txt"
    text.write_text("\n".join(s for pair in pairs for s in pair) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(dirs["m2m100"] / "sentencepiece.bpe"), vocab_size=100, model_type="bpe",
        character_coverage=1.0, minloglevel=2,  # <unk> 0, <s> 1, </s> 2, as fairseq's models have them
    )
    text.unlink()
    (dirs["m2m100"] / "sentencepiece.bpe.vocab").unlink()
    shutil.copy(dirs["m2m100"] / "sentencepiece.bpe.model", dirs["nllb"] / "sentencepiece.bpe.model")
    m2m100_tokenizer, nllb_tokenizer = _m2m100_tokenizer(dirs["m2m100"]), _nllb_tokenizer(dirs["nllb"])

    def config(vocab_size: int):
        return M2M100Config(
            vocab_size=vocab_size, d_model=d_model, encoder_layers=layers, decoder_layers=layers,
            encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
            activation_function="relu", max_position_embeddings=128, pad_token_id=1, bos_token_id=0, eos_token_id=2,
            decoder_start_token_id=2, scale_embedding=True, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
        )

    torch.manual_seed(seed)
    model = M2M100ForConditionalGeneration(config(_vocab_size(m2m100_tokenizer)))
    m2m100_tokenizer.src_lang, m2m100_tokenizer.tgt_lang = "en", "de"
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains many times faster on one thread
    try:
        for step in range(train_steps):
            batch = pairs[(step * 32) % len(pairs):][:32]
            enc = m2m100_tokenizer([s for s, _ in batch], text_target=[t for _, t in batch], return_tensors="pt", padding=True)
            enc["labels"][enc["labels"] == 1] = -100
            model(**enc).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.generation_config.decoder_start_token_id = 2
    model.save_pretrained(dirs["m2m100"])
    m2m100_tokenizer.save_pretrained(dirs["m2m100"])

    # The same model under NLLB's ids: pieces and specials where they were, each code's row its M2M-100 tag's.
    rows = list(range(len(nllb_tokenizer)))
    for code, m2m100_code in NLLB_CODES.items():
        rows[nllb_tokenizer.convert_tokens_to_ids(code)] = m2m100_tokenizer.get_lang_id(m2m100_code)
    rows[nllb_tokenizer.convert_tokens_to_ids("<mask>")] = m2m100_tokenizer.get_lang_id("ja")
    nllb = M2M100ForConditionalGeneration(config(len(nllb_tokenizer)))
    state = model.state_dict()
    state = {k: v[rows] if v.dim() == 2 and v.size(0) == model.config.vocab_size else v for k, v in state.items()}
    nllb.load_state_dict(state)
    nllb.eval()
    nllb.generation_config.decoder_start_token_id = 2
    nllb.save_pretrained(dirs["nllb"])
    nllb_tokenizer.save_pretrained(dirs["nllb"])
    for kind, license_ in (("m2m100", "mit"), ("nllb", "cc-by-nc-4.0")):
        (dirs[kind] / "README.md").write_text(f"---\nlanguage:\n- en\n- de\nlicense: {license_}\n---\n\n# a tiny random {kind}\n")
    return dirs


def _vocab_size(tokenizer) -> int:
    if hasattr(tokenizer, "lang_code_to_id"):  # M2M100Tokenizer: the pieces, the language tags, the made-up words
        return tokenizer.vocab_size + len(tokenizer.lang_code_to_id) + tokenizer.num_madeup_words
    return len(tokenizer)


def _m2m100_tokenizer(out: Path):
    import sentencepiece as spm
    from transformers import M2M100Tokenizer

    sp = spm.SentencePieceProcessor(model_file=str(out / "sentencepiece.bpe.model"))
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}  # fairseq's dictionary, as facebook/m2m100_418M's vocab.json
    for i in range(3, sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    (out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1))
    return M2M100Tokenizer(str(out / "vocab.json"), str(out / "sentencepiece.bpe.model"), src_lang="en", tgt_lang="de")


def _nllb_tokenizer(out: Path):
    from transformers import NllbTokenizer

    tokenizer = NllbTokenizer.from_pretrained(str(out), src_lang="eng_Latn", tgt_lang="deu_Latn")
    # transformers 5 converts the sentencepiece model without the language codes (NLLB's own tokenizer.json has
    # them after the pieces): add them as the published tokenizer.json holds them, special, one id each.
    tokenizer.add_special_tokens({"additional_special_tokens": list(NLLB_CODES)})
    tokenizer.src_lang = "eng_Latn"
    return tokenizer

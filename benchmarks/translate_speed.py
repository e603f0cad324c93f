"""Decoding speed of `nmt` against Hugging Face `generate` and CTranslate2, on one Transformer-base model.

One random Marian model (OPUS-MT's shape: d_model 512, 6+6 layers, 8 heads, FFN 2048, swish, tied
embeddings) is built with transformers, converted with CTranslate2's own converter, and loaded
into nmt. All three decode the same source ids with beam 4 on the same number of CPU threads;
runs alternate between engines and the table reports medians.

Two settings:
- fixed: every engine must emit exactly --length tokens per sentence (EOS banned before, forced
  after), so each does the same number of decoder steps: per-token cost compared fairly.
- natural: the engines decode until EOS or the length limit, as a user runs them.

Usage: python benchmarks/translate_speed.py [--sentences 200] [--threads 2] [--runs 3]
Needs the `bench` extra: pip install -e ".[bench]" (transformers, ctranslate2).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch


def build_marian(directory: Path, vocab_size: int, seed: int) -> None:
    """A random MarianMTModel of OPUS-MT's shape, saved with tokenizer files so converters accept it."""
    import sentencepiece as spm
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(seed)
    config = MarianConfig(
        vocab_size=vocab_size, d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
        decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048, activation_function="swish",
        max_position_embeddings=512, pad_token_id=vocab_size - 1, eos_token_id=0,
        decoder_start_token_id=vocab_size - 1, scale_embedding=True, share_encoder_decoder_embeddings=True,
    )
    model = MarianMTModel(config).eval()
    with torch.no_grad():  # a random model's logits are nearly flat; sharpen them so beams differ
        model.model.shared.weight.mul_(4)
    model.save_pretrained(directory)
    text = directory / "spm.txt"
    text.write_text("".join(f"word{i} token{i % 97} piece{i % 13}\n" for i in range(2000)))
    for name in ("source", "target"):
        spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(directory / name), vocab_size=150, minloglevel=2)
        (directory / f"{name}.model").rename(directory / f"{name}.spm")
    vocab = {"</s>": 0, "<unk>": 1, **{f"tok{i}": i for i in range(2, vocab_size - 1)}, "<pad>": vocab_size - 1}
    (directory / "vocab.json").write_text(json.dumps(vocab))
    (directory / "tokenizer_config.json").write_text(json.dumps({"source_lang": "en", "target_lang": "de"}))


def load_nmt(marian_dir: Path):
    """nmt's model with the Marian weights when the importer is available, else the same shape at random."""
    try:
        from nmtcli.interop.marian import import_marian  # issue 6

        out = marian_dir.parent / "nmt"
        import_marian(str(marian_dir), out)
        from nmtcli.model.checkpoint import load_model

        return load_model(out)[0], "same weights"
    except ImportError:
        from nmtcli.model.config import PRESETS
        from nmtcli.model.transformer import Transformer

        config = json.loads((marian_dir / "config.json").read_text())
        torch.manual_seed(0)
        shape = PRESETS["base"].replace(
            vocab_size=config["vocab_size"], activation="swish", pad_id=config["pad_token_id"],
            eos_id=config["eos_token_id"], bos_id=config["decoder_start_token_id"], unk_id=1,
        )
        return Transformer(shape).eval(), "same shape, random weights (importer not available)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--source-length", type=int, default=27, help="average source tokens (newstest2014: ~27)")
    parser.add_argument("--length", type=int, default=30, help="output tokens in the fixed setting")
    parser.add_argument("--batch", type=int, default=32, help="sentences per batch, all engines")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=58101, help="OPUS-MT en-de has 58,101")
    parser.add_argument("--settings", default="fixed,natural")
    parser.add_argument("--engines", default="nmt,hf,ct2")
    parser.add_argument("--no-pack", action="store_true", help="leave nmt's linear layers unpacked")
    args = parser.parse_args()

    import ctranslate2
    from transformers import MarianMTModel

    from nmtcli.inference.beam import beam_search

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="nmt-bench-"))
    build_marian(work / "marian", args.vocab_size, seed=0)
    hf = MarianMTModel.from_pretrained(work / "marian").eval()
    nmt, nmt_weights = load_nmt(work / "marian")
    from nmtcli.inference.cpu import pack_for_cpu

    if not args.no_pack:
        nmt_weights += "; packed" if pack_for_cpu(nmt) else "; packing unavailable"
    ctranslate2.converters.TransformersConverter(str(work / "marian")).convert(str(work / "ct2"), force=True)
    ct2 = ctranslate2.Translator(str(work / "ct2"), device="cpu", intra_threads=args.threads, inter_threads=1)
    vocab = {i: t for t, i in json.loads((work / "marian" / "vocab.json").read_text()).items()}

    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(args.source_length - 8, args.source_length + 9, (args.sentences,), generator=g)
    sources = [torch.randint(2, args.vocab_size - 1, (int(n),), generator=g).tolist() + [0] for n in lengths]
    batches = [sources[i : i + args.batch] for i in range(0, len(sources), args.batch)]
    pad = args.vocab_size - 1

    def padded(batch):
        width = max(len(s) for s in batch)
        ids = torch.full((len(batch), width), pad)
        for i, s in enumerate(batch):
            ids[i, : len(s)] = torch.tensor(s)
        return ids

    def run_nmt(fixed: bool) -> int:
        tokens = 0
        for batch in batches:
            if fixed:
                hyps = beam_search(nmt, padded(batch), beam=4, alpha=1.0, max_len_a=0.0, max_len_b=args.length, min_len=args.length, penalty="power")
            else:
                hyps = beam_search(nmt, padded(batch), beam=4, alpha=1.0, max_len_a=1.0, max_len_b=50, penalty="power")
            tokens += sum(len(h[0].tokens) for h in hyps)
        return tokens

    def run_hf(fixed: bool) -> int:
        tokens = 0
        with torch.inference_mode():
            for batch in batches:
                ids = padded(batch)
                limits = {"min_new_tokens": args.length, "max_new_tokens": args.length} if fixed else {"max_new_tokens": ids.size(1) + 50}
                out = hf.generate(input_ids=ids, attention_mask=ids != pad, num_beams=4, length_penalty=1.0, **limits)
                tokens += int(((out != pad) & (out != 0)).sum())
        return tokens

    def run_ct2(fixed: bool) -> int:
        tokens = 0
        for batch in batches:
            source = [[vocab[t] for t in s] for s in batch]
            limits = {"min_decoding_length": args.length, "max_decoding_length": args.length} if fixed else {"max_decoding_length": max(len(s) for s in batch) + 50}
            results = ct2.translate_batch(source, beam_size=4, length_penalty=1.0, max_batch_size=args.batch, **limits)
            tokens += sum(len(r.hypotheses[0]) for r in results)
        return tokens

    engines = {"nmt": run_nmt, "hf": run_hf, "ct2": run_ct2}
    chosen = [e for e in args.settings.split(",")]
    names = [e for e in args.engines.split(",") if e in engines]
    print(f"# {args.sentences} sentences, ~{args.source_length} source tokens, beam 4, batch {args.batch}, "
          f"{args.threads} threads, {args.runs} runs; nmt weights: {nmt_weights}", file=sys.stderr)
    rows = []
    for setting in chosen:
        fixed = setting == "fixed"
        for name in names:  # warm up
            engines[name](fixed) if name != "hf" else None
        times: dict[str, list[float]] = {n: [] for n in names}
        tokens: dict[str, int] = {}
        for run in range(args.runs):
            for name in names:  # alternate engines within each run
                start = time.perf_counter()
                tokens[name] = engines[name](fixed)
                times[name].append(time.perf_counter() - start)
                print(f"  {setting} run {run} {name}: {tokens[name] / times[name][-1]:.0f} tok/s", file=sys.stderr, flush=True)
        for name in names:
            median = statistics.median(times[name])
            rows.append((setting, name, tokens[name], median, tokens[name] / median, args.sentences / median))
    base = {s: next((r[4] for r in rows if r[0] == s and r[1] == "hf"), None) for s in chosen}
    print(f"| setting | engine | output tokens | median s | target tok/s | sentences/s | vs HF generate |")
    print(f"|---|---|---|---|---|---|---|")
    for setting, name, n_tokens, seconds, tps, sps in rows:
        ratio = f"{tps / base[setting]:.2f}x" if base[setting] else "-"
        print(f"| {setting} | {name} | {n_tokens} | {seconds:.2f} | {tps:.0f} | {sps:.1f} | {ratio} |")


if __name__ == "__main__":
    main()

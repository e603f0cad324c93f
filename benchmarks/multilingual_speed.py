"""Decoding speed on an NLLB-200-shaped model: nmt against transformers' `generate` and CTranslate2, on this CPU.

One random M2M100ForConditionalGeneration of NLLB-200-distilled-600M's shape (d_model 1024, 12+12 layers, 16
heads, FFN 4096, ReLU, pre-norm, a vocabulary of 256,206 with the 202 language codes; --d-model, --layers and
--vocab-size shrink it) is built with transformers and saved with an NllbTokenizer over that vocabulary, imported
with `nmt import nllb`'s code and converted with CTranslate2's own converter. All three decode the same source
ids (`eng_Latn ids </s>`) into deu_Latn (the tag forced first) with beam 4 and exactly --length decoder steps per
sentence (EOS banned before, forced after; nmt and transformers end with an EOS step, CTranslate2 stops at its
limit), in batches of --batch sentences, fp32 and int8 (nmt --precision int8, CTranslate2's int8, transformers after
torch's quantize_dynamic). Each engine runs in a process of its own (as in translate_speed.py: their OpenMP
runtimes slow each other in one process), on --threads threads; the table gives the median of --runs after a
warm-up, in output tokens per second.

Usage:
  python benchmarks/multilingual_speed.py                          # NLLB-600M's shape, 16 sentences
  python benchmarks/multilingual_speed.py --sentences 4 --runs 1 --length 4 --layers 2 --vocab-size 20000   # smoke
Needs the `bench` extra (transformers, ctranslate2) and ~10 GB of memory at the default shape.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from background_load import load_average

ENGINES = ("nmt", "hf", "ct2")
EOS, PAD = 2, 1


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--source-length", type=int, default=27)
    parser.add_argument("--length", type=int, default=20, help="decoder steps per sentence (the target tag and EOS included)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="engines taken in turn this many times (a process each), "
                        "so that a change in the machine's load falls on all of them; the table gives the median of the rounds")
    parser.add_argument("--dtypes", default="fp32,int8")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--vocab-size", type=int, default=256206)
    parser.add_argument("--wait-policy", choices=("as-run", "passive", "active"), default="as-run",
                        help="OpenMP's wait policy in each engine's process: as-run (nmt's as `nmt translate` chooses it, "
                             "threads.py: sleep at once on a busy machine; the others' their own default, spinning), or one "
                             "policy for all (OMP_WAIT_POLICY)")
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument("--engine", help=argparse.SUPPRESS)  # internal: time one engine in this process
    parser.add_argument("--work", help=argparse.SUPPRESS)
    return parser.parse_args()


def build(directory: Path, args) -> None:
    """The random model and an NllbTokenizer over its whole vocabulary, as facebook/nllb-200-* are published."""
    import sentencepiece as spm
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    from nmtcli.inference.language_codes import NLLB_CODES

    torch.manual_seed(0)
    d = args.d_model
    config = M2M100Config(vocab_size=args.vocab_size, d_model=d, encoder_layers=args.layers, decoder_layers=args.layers,
                          encoder_attention_heads=d // 64, decoder_attention_heads=d // 64, encoder_ffn_dim=4 * d, decoder_ffn_dim=4 * d,
                          activation_function="relu", max_position_embeddings=1024, pad_token_id=PAD, bos_token_id=0, eos_token_id=EOS,
                          decoder_start_token_id=EOS, scale_embedding=True)
    model = M2M100ForConditionalGeneration(config).eval()
    with torch.no_grad():  # a random model's logits are nearly flat; sharpen them so beams differ
        model.model.shared.weight.mul_(4)
    model.save_pretrained(directory)
    pieces = args.vocab_size - len(NLLB_CODES) - 1 - 4  # fairseq's four, the pieces, the codes, <mask>
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, **{f"\u2581w{i}": 4 + i for i in range(pieces)}}
    vocab.update({code: len(vocab) + i for i, code in enumerate(NLLB_CODES)})
    vocab["<mask>"] = len(vocab)
    tokenizer = NllbTokenizer(vocab=vocab, merges=[], additional_special_tokens=list(NLLB_CODES))
    tokenizer.save_pretrained(directory)
    text = directory / "spm.txt"  # the import copies a sentencepiece model; the benchmark feeds ids
    text.write_text("".join(f"w{i} w{i % 97}\n" for i in range(2000)))
    spm.SentencePieceTrainer.train(input=str(text), model_prefix=str(directory / "sentencepiece.bpe"), vocab_size=100, minloglevel=2)
    (directory / "sentencepiece.bpe.vocab").unlink()
    text.unlink()


def sources(args) -> tuple[list[list[int]], int, int]:
    """The source ids (`eng_Latn ids </s>`, random pieces, sorted by length) and the two tags' ids."""
    from nmtcli.inference.language_codes import NLLB_CODES

    first_code = args.vocab_size - len(NLLB_CODES) - 1
    eng, deu = first_code + NLLB_CODES.index("eng_Latn"), first_code + NLLB_CODES.index("deu_Latn")
    g = torch.Generator().manual_seed(1)
    lengths = torch.randint(args.source_length - 8, args.source_length + 9, (args.sentences,), generator=g)
    rows = [[eng, *torch.randint(4, first_code, (int(n),), generator=g).tolist(), EOS] for n in lengths]
    return sorted(rows, key=len), eng, deu


def padded(rows: list[list[int]]) -> torch.Tensor:
    out = torch.full((len(rows), max(map(len, rows))), PAD)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.tensor(r)
    return out


def engine_environment(name: str, args) -> dict[str, str]:
    """An engine's process environment: nmt's threads as `nmt translate` sets them (threads.choose: on a busy machine
    its threads sleep at once instead of spinning), the others as their users run them; or one wait policy for all."""
    import os

    from nmtcli import threads

    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    if args.wait_policy != "as-run":
        return {**env, "OMP_WAIT_POLICY": args.wait_policy.upper()}
    return {**env, **threads.choose(env)} if name == "nmt" else env


def time_engine(args) -> None:
    """In its own process: load the engine's model per dtype, warm up, time --runs passes; print JSON rows."""
    torch.set_num_threads(args.threads)
    work = Path(args.work)
    rows, _, deu = sources(args)
    batches = [rows[i: i + args.batch] for i in range(0, len(rows), args.batch)]
    results = []
    for dtype in args.dtypes.split(","):
        decode = engine(args.engine, dtype, work, deu, args)
        decode(batches)  # warm-up
        seconds = []
        for _ in range(args.runs):
            start = time.perf_counter()
            tokens = decode(batches)
            seconds.append(time.perf_counter() - start)
        results.append({"engine": args.engine, "dtype": dtype, "tokens": tokens, "median_s": statistics.median(seconds)})
    print(json.dumps(results))


def engine(name: str, dtype: str, work: Path, deu: int, args):
    """decode(batches) -> output tokens, for engine `name` in `dtype`."""
    steps = args.length
    if name == "nmt":
        from nmtcli.inference.beam import beam_search
        from nmtcli.inference.cpu import keep_freed_memory, pack_for_cpu
        from nmtcli.model.checkpoint import load_model

        model = load_model(work / "nmt")[0]
        pack_for_cpu(model, "int8" if dtype == "int8" else "packed")
        keep_freed_memory()

        def decode(batches):  # the tag, steps - 2 tokens, then the EOS step
            with torch.inference_mode():
                return sum(len(h[0].tokens) + 1 for b in batches for h in beam_search(
                    model, padded(b), beam=4, alpha=1.0, length_penalty="power", max_len_a=0, max_len_b=steps - 1, min_len=steps - 1,
                    prefixes=[[deu]] * len(b)))
        return decode
    if name == "hf":
        from transformers import M2M100ForConditionalGeneration

        model = M2M100ForConditionalGeneration.from_pretrained(work / "hf").eval()
        if dtype == "int8":  # what the PyTorch docs tell a CPU user to do for int8
            model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)

        def decode(batches):
            with torch.inference_mode():
                outs = [model.generate(input_ids=(ids := padded(b)), attention_mask=ids != PAD, num_beams=4, length_penalty=1.0,
                                       forced_bos_token_id=deu, min_new_tokens=steps, max_new_tokens=steps) for b in batches]
            return sum(o[:, 1:].numel() for o in outs)
        return decode
    import ctranslate2

    translator = ctranslate2.Translator(str(work / "ct2"), device="cpu", compute_type={"fp32": "float32"}.get(dtype, dtype),
                                        intra_threads=args.threads, inter_threads=1)
    vocab = json.loads((work / "nmt" / "vocab.json").read_text())
    piece = {i: p for p, i in vocab.items()}

    def decode(batches):
        tokens = 0
        for b in batches:
            results = translator.translate_batch([[piece[i] for i in r] for r in b], target_prefix=[["deu_Latn"]] * len(b), beam_size=4,
                                                 length_penalty=1.0, min_decoding_length=steps, max_decoding_length=steps)
            tokens += sum(len(r.hypotheses[0]) for r in results)
        return tokens
    return decode


def main() -> None:
    args = parse_args()
    if args.engine:
        time_engine(args)
        return
    work = Path(tempfile.mkdtemp(prefix="nmt-nllb-bench-"))
    started = time.perf_counter()
    build(work / "hf", args)
    from nmtcli.interop.m2m100 import import_m2m100

    import_m2m100(str(work / "hf"), work / "nmt", "nllb")
    engines = args.engines.split(",")
    if "ct2" in engines:
        import ctranslate2

        ctranslate2.converters.TransformersConverter(str(work / "hf")).convert(str(work / "ct2"), force=True)
    print(f"# built, imported and converted in {time.perf_counter() - started:.0f} s; {args.sentences} sentences of ~{args.source_length} "
          f"source tokens, beam 4, {args.length} decoder steps, batch {args.batch}, {args.threads} CPU threads, {args.runs} runs; "
          f"d_model {args.d_model}, {args.layers}+{args.layers} layers, vocabulary {args.vocab_size:,}; {load_average()}", file=sys.stderr)
    rounds: dict[tuple[str, str], list[dict]] = {}
    for round_ in range(args.rounds):
        for name in engines:
            command = [sys.executable, __file__, "--engine", name, "--work", str(work), *sys.argv[1:]]
            env = engine_environment(name, args)  # nmt's looks at the load now, as `nmt translate` does when it starts
            done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
            for row in json.loads(done.stdout.strip().splitlines()[-1]):
                rounds.setdefault((row["engine"], row["dtype"]), []).append(row)
                print(f"  round {round_} {name} {row['dtype']}: {row['tokens'] / row['median_s']:.1f} tok/s", file=sys.stderr)
            policy = env.get("OMP_WAIT_POLICY", "OpenMP's default (spin, then sleep)")
            print(f"  {name}: done ({load_average()}; wait policy {policy})", file=sys.stderr, flush=True)
    rows = [{**found[0], "median_s": statistics.median(r["median_s"] for r in found)} for found in rounds.values()]
    print("| engine | dtype | tokens | median s | tokens/s | vs transformers fp32 |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    base = next((r["tokens"] / r["median_s"] for r in rows if (r["engine"], r["dtype"]) == ("hf", "fp32")), None)
    for r in rows:
        speed = r["tokens"] / r["median_s"]
        print(f"| {r['engine']} | {r['dtype']} | {r['tokens']} | {r['median_s']:.2f} | {speed:.1f} | {f'{speed / base:.2f}x' if base else '-'} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()

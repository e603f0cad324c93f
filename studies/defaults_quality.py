"""Why tiny's translations come out short, measured on one trained model, and what the defaults change.

`length`: one model dir and its data dir (the demo corpus's test split by default). Each cause on its own,
on the same weights:

- the length penalty: BLEU, brevity penalty (BP) and hypothesis/reference length for several alphas
  (GNMT's ((5 + |Y|) / 6)^alpha, the paper's 0.6) and for fairseq's |Y|^alpha;
- the model itself: the reference forced through the decoder (teacher forcing, as in training): the
  probability of EOS at the reference's last positions, how often EOS is the model's first choice
  before the reference has ended, and, for the hypotheses shorter than their reference, whether the
  model prefers the reference (the search missed it) or the short hypothesis (the model's own choice);
- with --run: the averaged model against the run's last checkpoint (`nmt average --last 1`) and its best.

`run`: one training of the quickstart's recipe (`nmt quickstart --max-steps N`: tiny, pre-norm, warmup 100, the
last 5 of 20 checkpoints averaged) with more `nmt train` flags (`--label-smoothing 0`) or another tiny dropout,
scored at several alphas: the retrained suspects.

`filter`: the length-ratio filter of `nmt prepare`, plain 1.5 (`--ratio-slack 0`) against 1.5 + slack, on
your own files (the demo corpus split into train/valid/test .en/.de): pairs kept, and BLEU/BP of a `run` on each.

Tens of minutes per training on a busy 2-core CPU; studies/results/defaults-quality-cpu-2026-11-26.txt has
the commands, seeds and numbers of docs/training.md and docs/data.md.

    python studies/defaults_quality.py length -m models/tiny-demo -d data/demo --run runs/tiny-demo
    python studies/defaults_quality.py run -d data/demo --out /tmp/dq/ls0 --steps 1000 --train-args "--label-smoothing 0"
    python studies/defaults_quality.py filter --corpus own --steps 1000 --seeds 1 2 --workdir /tmp/dq
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nmtcli.inference.penalties import lp  # noqa: E402
from nmtcli.inference.settings import SearchSettings  # noqa: E402
from nmtcli.inference.translator import Translator  # noqa: E402

ALPHAS = (0.0, 0.6, 1.0, 1.5, 2.0)


def bleu_bp(hypotheses: list[str], references: list[str]) -> tuple[float, float, float]:
    """sacreBLEU's BLEU, its brevity penalty and the hypothesis/reference length ratio (in its tokens)."""
    from sacrebleu.metrics import BLEU

    result = BLEU().corpus_score(hypotheses, [references])
    return result.score, result.bp, result.sys_len / result.ref_len


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def translate(model: Path, sources: list[str], settings: SearchSettings) -> list[str]:
    return list(Translator(model, "cpu", settings).translate(sources))


def alpha_table(model: Path, sources: list[str], references: list[str]) -> list[tuple]:
    rows = []
    for penalty, alphas in (("gnmt", ALPHAS), ("power", (1.0,))):
        for alpha in alphas:
            hyps = translate(model, sources, SearchSettings(alpha=alpha, length_penalty=penalty))
            rows.append((f"{penalty} alpha {alpha}", *bleu_bp(hyps, references)))
    return rows


@torch.inference_mode()
def eos_profile(model_dir: Path, sources: list[str], references: list[str], hypotheses: list[str], alpha: float) -> dict:
    """Teacher-forced references: P(EOS) where the reference ends and before, and search vs model errors."""
    translator = Translator(model_dir, "cpu")
    model, tok, eos = translator.model, translator.tokenizer, translator.model.config.eos_id
    src_ids, ref_ids, hyp_ids = tok.encode(sources), tok.encode_target(references), tok.encode_target(hypotheses)
    at_end, before_end, early_argmax, positions = [], [], 0, 0
    shorter = search_errors = 0
    for s, r, h in zip(src_ids, ref_ids, hyp_ids):
        log_probs = _forced_log_probs(model, s, r)  # (len(r) + 1, V)
        p_eos = log_probs[:, eos].exp()
        at_end.append(float(p_eos[-1]))
        if len(r) >= 1:
            before_end.append(float(p_eos[-2]))  # after the reference's second-to-last piece... its last piece still to come
        argmax = log_probs.argmax(-1)
        early_argmax += int((argmax[:-1] == eos).any())
        positions += len(r)
        if len(h) < len(r):
            shorter += 1
            ref_score = _sequence_score(log_probs, r, eos) / lp(len(r) + 1, alpha)
            hyp_score = _sequence_score(_forced_log_probs(model, s, h), h, eos) / lp(len(h) + 1, alpha)
            search_errors += int(ref_score > hyp_score)
    n = len(src_ids)
    return {
        "sentences": n,
        "mean P(EOS) at the reference's end": statistics.mean(at_end),
        "median P(EOS) at the reference's end": statistics.median(at_end),
        "mean P(EOS) one piece before the end": statistics.mean(before_end),
        "share with EOS the first choice before the end": early_argmax / n,
        "hypotheses shorter than the reference (pieces)": shorter / n,
        "of those, model prefers the reference (search error)": search_errors / max(shorter, 1),
        "reference pieces / sentence": positions / n,
        "hypothesis pieces / sentence": sum(len(h) for h in hyp_ids) / n,
    }


BUCKETS = ((1, 3), (4, 8), (9, 16), (17, 1000))


@torch.inference_mode()
def eos_by_length(model_dir: Path, sources: list[str], references: list[str], hypotheses: list[str]) -> list[tuple]:
    """By the reference's length in pieces: sentences, hypothesis/reference pieces, and the mean P(EOS) the model gives
    (the reference forced) at the reference's end, 1 and 2 pieces before it, and anywhere before it (mean of the max)."""
    translator = Translator(model_dir, "cpu")
    model, tok, eos = translator.model, translator.tokenizer, translator.model.config.eos_id
    rows = []
    src_ids, ref_ids, hyp_ids = tok.encode(sources), tok.encode_target(references), tok.encode_target(hypotheses)
    for low, high in BUCKETS:
        picked = [i for i, r in enumerate(ref_ids) if low <= len(r) <= high]
        if not picked:
            continue
        at = {0: [], 1: [], 2: []}
        most = []
        for i in picked:
            p_eos = _forced_log_probs(model, src_ids[i], ref_ids[i])[:, eos].exp()
            for back in at:
                if len(p_eos) > back:
                    at[back].append(float(p_eos[-1 - back]))
            most.append(float(p_eos[:-1].max()) if len(p_eos) > 1 else 0.0)
        ratio = sum(len(hyp_ids[i]) for i in picked) / sum(len(ref_ids[i]) for i in picked)
        rows.append((f"{low}-{high}" if high < 1000 else f"{low}+", len(picked), ratio, *(statistics.mean(at[b]) for b in (0, 1, 2)),
                     statistics.mean(most)))
    return rows


def _forced_log_probs(model, source: list[int], target: list[int]) -> torch.Tensor:
    cfg = model.config
    src = torch.tensor([source + [cfg.eos_id]])
    tgt_in = torch.tensor([[cfg.bos_id] + target])
    return model(src, tgt_in)[0].float().log_softmax(-1)


def _sequence_score(log_probs: torch.Tensor, target: list[int], eos: int) -> float:
    index = torch.tensor(target + [eos])
    return float(log_probs.gather(1, index[:, None]).sum())


@torch.inference_mode()
def min_length_translations(model_dir: Path, sources: list[str], ratio: float, alpha: float = 0.6) -> list[str]:
    """Beam search with EOS forbidden before ratio x the source's pieces: a minimum length rule, one sentence at a time."""
    from nmtcli.inference.beam import beam_search

    translator = Translator(model_dir, "cpu")
    model, tok = translator.model, translator.tokenizer
    out = []
    for ids in tok.encode(sources):
        src = torch.tensor([ids + [model.config.eos_id]])
        best = beam_search(model, src, beam=4, alpha=alpha, min_len=int(ratio * len(ids)))[0][0]
        out.append(tok.decode(best.tokens))
    return out


# `nmt` with the tiny preset's dropout replaced (nmt train has no --dropout flag): what a recipe change would train.
WITH_DROPOUT = ("import sys; from nmtcli.model.config import PRESETS; "
                "PRESETS['tiny'] = PRESETS['tiny'].replace(dropout=float(sys.argv.pop(1))); from nmtcli.cli import main; main()")


def nmt(*args: str, cwd: Path | None = None, dropout: float | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = ["-m", "nmtcli"] if dropout is None else ["-c", WITH_DROPOUT, str(dropout)]
    result = subprocess.run([sys.executable, *command, *args], capture_output=True, text=True, env=env, cwd=cwd)
    if result.returncode != 0:
        raise SystemExit(f"nmt {' '.join(args)} failed:\n{result.stderr[-3000:]}")
    return result.stdout


def checkpoint_table(run: Path, sources: list[str], references: list[str], averaged: Path) -> list[tuple]:
    rows = [("averaged (the model dir)", *bleu_bp(translate(averaged, sources, SearchSettings()), references))]
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in (("last checkpoint", ["--last", "1", "--at", "last"]), ("best checkpoint", ["--last", "1", "--at", "best"])):
            out = Path(tmp) / name.replace(" ", "-")
            nmt("average", str(run), *args, "-o", str(out))
            rows.append((name, *bleu_bp(translate(out, sources, SearchSettings()), references)))
    return rows


def print_table(title: str, rows: list[tuple]) -> None:
    print(f"\n{title}\n| setting | BLEU | BP | hyp/ref length |\n|---|---|---|---|")
    for name, bleu, bp, ratio in rows:
        print(f"| {name} | {bleu:.1f} | {bp:.3f} | {ratio:.3f} |")


def length_main(args: argparse.Namespace) -> None:
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    data = Path(args.data)
    manifest = json.loads((data / "manifest.json").read_text())
    src_lang, tgt_lang = manifest["source_lang"], manifest["target_lang"]
    sources, references = read(data / f"{args.split}.{src_lang}"), read(data / f"{args.split}.{tgt_lang}")
    model = Path(args.model)
    print(f"model {model}, {len(sources)} {args.split} sentences of {data}")
    if not args.eos_only:
        print_table("length penalty (beam 4)", alpha_table(model, sources, references))
    if args.min_ratios:
        print_table("EOS forbidden before RATIO x the source's pieces (gnmt alpha 0.6)",
                [(f"min length {r} x source", *bleu_bp(min_length_translations(model, sources, r), references)) for r in args.min_ratios])
    hyps = translate(model, sources, SearchSettings())
    if args.eos_only:
        args.run = None
    print("\nthe references forced through the model (alpha 0.6 hypotheses):")
    for key, value in eos_profile(model, sources, references, hyps, 0.6).items():
        print(f"| {key} | {value:.3f} |" if isinstance(value, float) else f"| {key} | {value} |")
    print("\nby the reference's length (the reference forced; hypotheses at alpha 0.6)\n"
          "| reference pieces | sentences | hyp/ref pieces | P(EOS) at the end | 1 before | 2 before | max P(EOS) before the end |\n"
          "|---|---|---|---|---|---|---|")
    for name, n, ratio, p0, p1, p2, most in eos_by_length(model, sources, references, hyps):
        print(f"| {name} | {n} | {ratio:.2f} | {p0:.3f} | {p1:.3f} | {p2:.3f} | {most:.3f} |")
    if args.run:
        print_table("averaged vs single checkpoints (alpha 0.6)", checkpoint_table(Path(args.run), sources, references, model))


# `nmt quickstart --max-steps N`'s recipe: tiny, pre-norm, warmup 100, 20 checkpoints, the last 5 averaged.
QUICKSTART = ["--preset", "tiny", "--norm", "pre", "--warmup", "100"]


def train_and_score(data: Path, out: Path, seed: int, steps: int, train_args: list[str], search: SearchSettings,
                    log, dropout: float | None = None) -> tuple[float, float, float]:
    """`nmt train` (as the quickstart does, for `steps` steps), `nmt average --last 5`, and BLEU/BP on the test split."""
    run, model = out / "run", out / "model"
    nmt("train", "--data", str(data), *QUICKSTART, *train_args, "-o", str(run), "--max-steps", str(steps),
        "--save-every", str(max(1, steps // 20)), "--seed", str(seed), "--device", "cpu", "--restart", dropout=dropout)
    nmt("average", str(run), "--last", "5", "-o", str(model))
    manifest = json.loads((data / "manifest.json").read_text())
    sources = read(data / f"test.{manifest['source_lang']}")
    references = read(data / f"test.{manifest['target_lang']}")
    result = bleu_bp(translate(model, sources, search), references)
    log(f"{out.name} seed {seed}: BLEU {result[0]:.2f} BP {result[1]:.3f} ratio {result[2]:.3f}")
    return result


def filter_main(args: argparse.Namespace) -> None:
    """The length-ratio filter: pairs kept and test BLEU, old (plain 1.5 ratio) against new (1.5 + slack)."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    log_file = open(work / "filter.log", "a")

    def log(line: str) -> None:
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    rows = []
    for name, slack in (("plain ratio 1.5 (--ratio-slack 0)", 0), (f"1.5 + {args.slack} pieces", args.slack)):
        data = work / f"data-slack{slack}"
        nmt("prepare", "--train", args.corpus + "/train", "--valid", args.corpus + "/valid", "--test", args.corpus + "/test",
            "-s", "en", "-t", "de", "--ratio-slack", str(slack), "-o", str(data))
        split = json.loads((data / "manifest.json").read_text())["splits"]["train"]
        scores = [train_and_score(data, work / f"slack{slack}-seed{seed}", seed, args.steps, [], SearchSettings(), log)
                  for seed in args.seeds]
        rows.append((name, split["pairs"], split["input_pairs"], scores))
    print("\n| ratio filter | pairs kept | " + " | ".join(f"BLEU (BP) seed {s}" for s in args.seeds) + " | mean BLEU |")
    print("|---|---|" + "---|" * len(args.seeds) + "---|")
    for name, kept, total, scores in rows:
        cells = " | ".join(f"{b:.1f} ({bp:.3f})" for b, bp, _ in scores)
        print(f"| {name} | {kept:,} of {total:,} | {cells} | {statistics.mean(b for b, _, _ in scores):.1f} |")


def run_main(args: argparse.Namespace) -> None:
    """One training run of the quickstart recipe (with extra `nmt train` flags), scored at several search settings."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = Path(args.data)
    train_and_score(data, out, args.seed, args.steps, args.train_args.split(), SearchSettings(), print, args.dropout)
    manifest = json.loads((data / "manifest.json").read_text())
    sources = read(data / f"test.{manifest['source_lang']}")
    references = read(data / f"test.{manifest['target_lang']}")
    rows = [(f"alpha {a}", *bleu_bp(translate(out / "model", sources, SearchSettings(alpha=a)), references)) for a in args.alphas]
    print_table(f"{out.name}: seed {args.seed}, {args.steps} steps, train flags {args.train_args!r}, dropout {args.dropout}", rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    length = sub.add_parser("length", help="why one model's outputs are short")
    length.add_argument("-m", "--model", required=True)
    length.add_argument("-d", "--data", required=True)
    length.add_argument("--split", default="test")
    length.add_argument("--run", help="the model's run dir: also the last and the best checkpoint alone")
    length.add_argument("--min-ratios", type=float, nargs="*", default=[0.5, 0.75])
    length.add_argument("--eos-only", action="store_true", help="only the forced references (no alpha table, no checkpoints)")
    filt = sub.add_parser("filter", help="the length-ratio filter: pairs kept and BLEU, plain ratio against ratio + slack")
    filt.add_argument("--corpus", required=True, help="dir with train/valid/test .en/.de (the demo corpus as your own files)")
    filt.add_argument("--slack", type=int, default=5)
    filt.add_argument("--seeds", type=int, nargs="+", default=[1])
    filt.add_argument("--steps", type=int, default=2000)
    filt.add_argument("--workdir", required=True)
    run = sub.add_parser("run", help="train the quickstart recipe once (plus --train-args) and score it")
    run.add_argument("-d", "--data", required=True)
    run.add_argument("--out", required=True)
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--steps", type=int, default=2000)
    run.add_argument("--train-args", default="", help="more `nmt train` flags, e.g. '--label-smoothing 0'")
    run.add_argument("--dropout", type=float, help="the tiny preset's dropout (0.1) replaced by this")
    run.add_argument("--alphas", type=float, nargs="+", default=[0.6, 1.0])
    args = parser.parse_args()
    if args.what == "run":
        run_main(args)
    elif args.what == "length":
        length_main(args)
    elif args.what == "filter":
        filter_main(args)


if __name__ == "__main__":
    main()

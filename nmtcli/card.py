"""Model cards: the README.md of a model dir, written from its `config.json` values.

Two readers, two cards. `nmt average` writes a short card for the person who trained the model
(`local_card`: languages, architecture, data, the checkpoints averaged, how to run it). The Hub card
(`hub_card`) is what `nmt push` uploads and `nmt import` writes: YAML metadata the Hub indexes
(languages, license, tags, datasets, BLEU with its sacreBLEU signature), then the same facts as prose.
"""

from __future__ import annotations

import json
from typing import Any

from nmtcli.model.config import ModelConfig
from nmtcli.model.transformer import count_parameters


def local_card(values: dict[str, Any]) -> str:
    """README.md of a model dir written by `nmt average`."""
    m, t, lang = values["model"], values["training"], values["languages"]
    config = ModelConfig.from_dict(m)
    params = count_parameters(config)
    steps = ", ".join(str(s) for s in t["averaged_checkpoints"])
    base = _base_model(t)
    vocabulary = (f"Marian's source and target sentencepiece models over one {m['vocab_size']:,}-piece vocabulary"
                  if (values.get("tokenizer") or {}).get("kind") == "marian" else f"shared {m['vocab_size']:,}-piece sentencepiece BPE vocabulary")
    title = f"fine-tuned from {base}" if base else t["preset"]
    start = f"\n- Started from: {base} (`nmt train --init`), its weights at step 0" if base else ""
    languages, flag, pair, (src, tgt) = f"{lang['source']} -> {lang['target']}", "", f"{lang['source']}-{lang['target']}", (lang["source"], lang["target"])
    codes = list((values.get("tokenizer") or {}).get("languages") or {})
    if codes and t.get("directions"):  # trained on several pairs: the tag picks the output language
        languages, flag, pair, (src, tgt) = _multilingual(codes, t["directions"])
    return f"""# Transformer {pair} ({title})

A Transformer translation model ("Attention Is All You Need", Vaswani et al., 2017) trained with
[nmt](https://pypi.org/project/nmtcli/).

- Languages: {languages}
- Architecture: {config.depth} layers, d_model {m['d_model']}, d_ff {m['d_ff']}, {m['heads']} heads,
  {m['norm']}-norm, {m['activation']}, {vocabulary}; {params:,} parameters
- Training data: {t['data']} ({t['train_pairs']:,} sentence pairs after cleaning)
- Training: {t['steps']} steps; this model averages the checkpoints of steps {steps}{start}{_search(values.get("search"))}

## Use

```
cat input.{src} | nmt translate -m THIS_DIR{flag} > output.{tgt}
```
"""


def _search(search: dict[str, Any] | None) -> str:
    """The card's line on the search's brevity penalty `nmt average` calibrated, if it did."""
    if not search:
        return ""
    on = search.get("calibrated_on") or {}
    how = (f": validation BP {on['bp'][0]:.3f} -> {on['bp'][1]:.3f}, BLEU {on['bleu'][0]:.1f} -> {on['bleu'][1]:.1f} "
           f"on {on['lines']:,} lines") if on.get("bp") else ""
    if not search.get("brevity_penalty"):
        return f"\n- Search: the paper's (beam 4, alpha 0.6); brevity penalty 0, calibrated{how}"
    return (f"\n- Search: beam 4, alpha 0.6 and brevity penalty {search['brevity_penalty']:g} (length ratio {search['length_ratio']:.3f}), "
            f"calibrated{how}; `--brevity-penalty 0` gives the paper's search")


def _multilingual(codes: list[str], trained: list[str]) -> tuple[str, str, str, tuple[str, str]]:
    """A multilingual model of nmt's own: (its languages, the directions trained and the others, zero-shot, in words;
    the flags that pick the first trained direction; a name for the title; that direction's languages)."""
    from nmtcli.inference.language_codes import zero_shot

    others = zero_shot(codes, trained)
    words = f"{', '.join(codes)}, any direction; trained {', '.join(trained)}" + (f"; zero-shot (untrained) {', '.join(others)}" if others else "")
    src, tgt = trained[0].split("-", 1)
    return words, f" --source-lang {src} --target-lang {tgt}", "multilingual", (src, tgt)


def hub_card(values: dict[str, Any], repo_id: str, scores: dict[str, Any], license: str | None = None) -> str:
    """README.md for the Hub: YAML metadata (languages, license, tags, datasets, BLEU with its signature), then prose."""
    lang = values.get("languages", {})
    src, tgt = lang.get("source", "?"), lang.get("target", "?")
    training = values.get("training", {})
    imported = values.get("imported_from")
    license = license or values.get("license") or "apache-2.0"
    name = repo_id.split("/")[-1]
    codes = list((values.get("tokenizer") or {}).get("languages") or {})
    direction, flag, (first, last) = f"{src} -> {tgt}", "", (src, tgt)
    if codes and training.get("directions"):  # trained by nmt on several pairs: its languages, what was trained, the tag flags
        direction, flag, _, (first, last) = _multilingual(codes, training["directions"])
    lines = [
        _metadata(src, tgt, license, training.get("datasets") or [], name, scores, _base_model(training),
                  codes if training.get("directions") else None),
        "",
        f"# {name}",
        "",
        f"A Transformer translation model ({direction}) in the format of [nmt](https://pypi.org/project/nmtcli/), "
        'the toolkit for the Transformer of "Attention Is All You Need" (Vaswani et al., 2017).',
        "",
        "## Architecture",
        "",
        _architecture(values["model"]),
        "",
    ]
    if imported:
        lines += ["## Origin", "", f"Converted with `nmt import {imported.get('kind', '')}` from `{imported.get('source', '')}`"
                  + (f" (revision {imported['revision']})" if imported.get("revision") else "") + ". Its training data and recipe are those of the original model.", ""]
    if training:
        lines += _training(training)
    if scores:
        lines += ["## Evaluation", "", "| test set | metric | score | sacreBLEU signature |", "|---|---|---|---|"]
        for label, metrics in scores.items():
            for metric, v in metrics.items():
                lines.append(f"| {label} | {metric} | {v['score']:.1f} | `{v.get('signature', '')}` |")
        lines.append("")
    lines += [
        "## Use it with nmt",
        "",
        "```",
        "pip install nmtcli",
        f"cat input.{first} | nmt translate -m {repo_id}{flag} > output.{last}",
        f"nmt pull {repo_id} -o models/{name}    # or keep a local copy",
        "```",
        "",
    ]
    versions = values.get("versions")
    if versions:
        lines += ["Written with " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".", ""]
    return "\n".join(lines)


def _yaml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a valid YAML flow scalar


def _base_model(training: dict[str, Any]) -> str | None:
    """The model a fine-tuned model started from (`nmt train --init`): its Hub id or path, with the
    Hub id it was imported from where that is what the path holds."""
    init = training.get("init") or {}
    if not init:
        return None
    imported = (init.get("imported_from") or {}).get("source", "")
    model = str(init.get("model", ""))
    return model if _is_repo_id(model) or not _is_repo_id(imported) else imported


def _is_repo_id(text: str) -> bool:
    return text.count("/") == 1 and not text.startswith((".", "/"))


def _metadata(src: str, tgt: str, license: str, datasets: list[str], name: str, scores: dict[str, Any], base: str | None = None,
              languages: list[str] | None = None) -> str:
    """The card's YAML header, between `---` lines; `languages`: a multilingual model's own, listed instead of "mul"."""
    meta = ["---", "language:"]
    meta += [f"- {_yaml_string(code)}" for code in (languages or dict.fromkeys([src, tgt])) if code != "?"]
    meta += [f"license: {_yaml_string(license)}", "library_name: nmt", "pipeline_tag: translation", "tags:", "- translation", "- nmt", "- transformer"]
    if base and _is_repo_id(base):  # the Hub links the two ("Finetuned from") and lists it in the base model's tree
        meta += [f"base_model: {_yaml_string(base)}", "base_model_relation: finetune"]
    if datasets:
        meta += ["datasets:"] + [f"- {_yaml_string(d)}" for d in datasets]
    results = _model_index_results(src, tgt, scores)
    if results:
        meta += ["model-index:", f"- name: {_yaml_string(name)}", "  results:", *results]
    meta.append("---")
    return "\n".join(meta)


def _model_index_results(src: str, tgt: str, scores: dict[str, Any]) -> list[str]:
    """The `model-index` results the Hub shows as evaluation: one per test set, each metric with its signature."""
    results = []
    for label, metrics in scores.items():
        entries = []
        for metric, v in metrics.items():
            entries += [
                f"      - type: {_yaml_string(metric.lower())}",
                f"        name: {_yaml_string(metric)}",
                f"        value: {float(v['score'])}",
                "        verified: false",
                "        args:",
                f"          signature: {_yaml_string(v.get('signature', ''))}",
            ]
        results += [
            "  - task:",
            "      type: translation",
            f"      name: {_yaml_string(f'Translation {src}-{tgt}')}",
            "    dataset:",
            f"      name: {_yaml_string(label)}",
            f"      type: {_yaml_string(label.split('/')[0])}",
            "    metrics:",
            *entries,
        ]
    return results


def _architecture(m: dict[str, Any]) -> str:
    config = ModelConfig.from_dict(m)
    params = count_parameters(config)
    variants = []
    if m.get("positions", "interleaved") != "interleaved":
        variants.append(f"{m['positions']} positional encodings")
    if m.get("final_logits_bias"):
        variants.append("a final logits bias")
    return (
        f"{config.depth} layers, d_model {m['d_model']}, d_ff {m['d_ff']}, {m['heads']} heads, "
        f"{m['norm']}-norm, {m['activation']}, dropout {m['dropout']}, vocabulary {m['vocab_size']:,} "
        f"(one matrix for source, target and output); {params:,} parameters"
        + (f"; {', '.join(variants)}" if variants else "")
    )


def _training(training: dict[str, Any]) -> list[str]:
    """The sections on training data and recipe."""
    datasets = training.get("datasets") or []
    lines = []
    base = _base_model(training)
    if base:
        init = training["init"]
        revision = f" (revision {init['revision']})" if init.get("revision") else ""
        lines += ["## Base model", "", f"Fine-tuned from `{base}`{revision} with `nmt train --init`: training started from its weights "
                  f"(safetensors sha256 {init.get('weights_sha256', '?')[:16]}...) and kept its vocabulary, on the data below.", ""]
    lines += ["## Training data", "", f"{'Fine-tuning data: ' if base else ''}{training.get('data', 'unknown')} ({training.get('train_pairs', 0):,} sentence pairs after cleaning)."
              + (f" Datasets: {', '.join(datasets)}." if datasets else ""), ""]
    settings = training.get("settings", {})
    recipe = [f"preset {training.get('preset')}", f"{training.get('steps')} steps"]
    # max_tokens: what model dirs of earlier versions call batch_tokens
    recipe += [f"{k} {settings[k]}" for k in ("batch_tokens", "max_tokens", "update_freq", "warmup", "label_smoothing", "seed") if k in settings]
    averaged = training.get("averaged_checkpoints") or []
    lines += ["## Training recipe", "", ", ".join(str(r) for r in recipe) + (f"; the weights average the checkpoints of steps {', '.join(map(str, averaged))}." if averaged else "."), ""]
    return lines

"""The model of sec. 3: sizes of Table 3, the positional encoding formula, masking, config round-trip."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from nmtcli.model.config import PRESETS, ModelConfig
from nmtcli.model.incremental import decode_step, start_decoding
from nmtcli.model.transformer import Transformer, count_parameters, sinusoidal_positions

SMALL = ModelConfig(vocab_size=50, d_model=32, d_ff=64, heads=4, layers=2, dropout=0.0)
STUDENT = SMALL.replace(layers=3, decoder_layers=1)  # a distilled student's shape: a deep encoder, a shallow decoder
# A run dir's config.json written before decoder_layers existed (tests/test_names.py's OLD_RUN_CONFIG).
OLD_CONFIG = Path(__file__).parent / "data" / "run-config-2f24993.json"


def test_base_and_big_have_the_papers_parameter_counts():
    # Table 3: base 65M, big 213M (37k shared vocabulary, sec. 5.1).
    base = count_parameters(PRESETS["base"].replace(vocab_size=37000))
    big = count_parameters(PRESETS["big"].replace(vocab_size=37000))
    assert 63e6 <= base <= 66e6, base
    assert 210e6 <= big <= 216e6, big


def fairseq_parameters(vocab: int, d_model: int, d_ff: int, layers: int, shared_vocab: int | None = None) -> int:
    """fairseq's count for its post-norm `transformer` (sinusoidal positions, no final LayerNorm): each
    attention 4 projections d x d with biases, each FFN d x d_ff and d_ff x d with biases, a LayerNorm
    (weight, bias) after each sub-layer; `vocab` rows of embeddings shared by every use, or `vocab`
    source rows plus `shared_vocab` target rows (--share-decoder-input-output-embed only)."""
    attention = 4 * (d_model * d_model + d_model)
    ffn = d_model * d_ff + d_ff + d_ff * d_model + d_model
    norm = 2 * d_model
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = 2 * attention + ffn + 3 * norm
    embeddings = (vocab + (shared_vocab or 0)) * d_model
    return embeddings + layers * (encoder_layer + decoder_layer)


def test_small_is_fairseqs_transformer_iwslt_de_en():
    # transformer_iwslt_de_en: 6+6 layers, embed 512, FFN 1024, 4 heads, dropout 0.3; nmt shares one joint embedding.
    config = PRESETS["small"].replace(vocab_size=10_000)
    assert (config.layers, config.d_model, config.d_ff, config.heads, config.dropout) == (6, 512, 1024, 4, 0.3)
    assert (config.attention_dropout, config.activation_dropout, config.norm) == (0.0, 0.0, "post")  # fairseq's defaults
    assert count_parameters(config) == fairseq_parameters(10_000, 512, 1024, 6) == 36_663_296
    # (fairseq's own IWSLT14 de-en run keeps two dictionaries, 8,848 de and 6,632 en types, and shares only the
    # decoder's input and output embeddings: fairseq_parameters(8848, 512, 1024, 6, 6632), 39.5M.)
    with torch.device("meta"):
        shapes = {name: tuple(p.shape) for name, p in Transformer(config).named_parameters()}
    assert shapes["embedding.tokens.weight"] == (10_000, 512)
    assert shapes["encoder.layers.5.ffn.linear1.weight"] == (1024, 512) and shapes["decoder.layers.5.ffn.linear2.weight"] == (512, 1024)
    assert shapes["encoder.layers.0.self_attn.qkv_proj.weight"] == (3 * 512, 512)
    assert shapes["decoder.layers.0.cross_attn.kv_proj.weight"] == (2 * 512, 512)
    assert "encoder.layers.6.ffn.linear1.weight" not in shapes and "decoder.layers.6.ffn.linear1.weight" not in shapes
    assert config.d_k == 128  # 4 heads of 128


def test_the_student_presets_are_bergamots_tiny11_and_base_width_with_a_6_plus_2_depth():
    # tiny11 (Firefox Translations' en-de student, 32k vocabulary): d_model 256, FFN 1536, 8 heads, 6+2, every embedding tied.
    tiny, base = PRESETS["student-tiny"], PRESETS["student-base"]
    assert (tiny.d_model, tiny.d_ff, tiny.heads, tiny.layers, tiny.decoder_layers, tiny.norm) == (256, 1536, 8, 6, 2, "post")
    assert (base.d_model, base.d_ff, base.heads, base.layers, base.decoder_layers, base.norm) == (512, 2048, 8, 6, 2, "post")
    d, f, v = 256, 1536, 32000
    attention, ffn, norm = 4 * (d * d + d), d * f + f + f * d + d, 2 * d
    expected = v * d + 6 * (attention + ffn + 2 * norm) + 2 * (2 * attention + ffn + 3 * norm)  # one matrix: source, target, output
    assert count_parameters(tiny.replace(vocab_size=v)) == expected == 17_138_688


def test_parameter_count_matches_the_allocated_model_and_shares_one_embedding():
    model = Transformer(SMALL)
    names = [n for n, _ in model.named_parameters()]
    assert sum(1 for n in names if "tokens.weight" in n) == 1  # source, target and output share one matrix
    assert count_parameters(SMALL) == sum(p.numel() for p in model.parameters())


def test_positional_encoding_equals_the_formula():
    d = 16
    table = sinusoidal_positions(60, d)
    for pos in (0, 1, 7, 59):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)


def test_embeddings_are_scaled_by_sqrt_d_model():
    model = Transformer(SMALL).eval()
    tokens = torch.tensor([[5, 6, 7]])
    expected = model.embedding.tokens.weight[tokens] * math.sqrt(32) + sinusoidal_positions(3, 32)
    assert torch.allclose(model.embedding(tokens), expected, atol=1e-6)


def test_decoder_is_causal_changing_a_future_token_changes_no_earlier_output():
    torch.manual_seed(0)
    model = Transformer(SMALL).eval()
    src = torch.tensor([[5, 6, 7, 3]])
    tgt = torch.tensor([[2, 10, 11, 12, 13, 14]])
    before = model(src, tgt)
    for t in range(1, tgt.size(1)):
        changed = tgt.clone()
        changed[0, t] = 20
        after = model(src, changed)
        assert torch.allclose(before[:, :t], after[:, :t], atol=1e-6), f"position {t} leaked backwards"
        assert not torch.allclose(before[:, t:], after[:, t:], atol=1e-6)


def test_padding_changes_no_output():
    torch.manual_seed(0)
    model = Transformer(SMALL).eval()
    src = torch.tensor([[5, 6, 7, 3]])
    tgt = torch.tensor([[2, 10, 11]])
    alone = model(src, tgt)
    # The same sentence in a batch beside longer ones: padded on both sides.
    src_batch = torch.tensor([[5, 6, 7, 3, 0, 0], [8, 9, 10, 11, 12, 3]])
    tgt_batch = torch.tensor([[2, 10, 11, 0, 0], [2, 4, 5, 6, 7]])
    batched = model(src_batch, tgt_batch)
    assert torch.allclose(alone[0], batched[0, :3], atol=1e-5)


def test_incremental_decoding_equals_full_recomputation():
    torch.manual_seed(0)
    model = Transformer(SMALL).eval()
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt = torch.tensor([[2, 10, 11, 12], [2, 13, 14, 15]])
    full = model(src, tgt)
    memory, mask = model.encode(src)
    state = start_decoding(model, memory, mask, beam=1)
    for t in range(tgt.size(1)):
        step = decode_step(model, tgt[:, t], state)
        assert torch.allclose(step, full[:, t], atol=1e-5)


def test_a_student_has_a_deep_encoder_and_a_shallow_decoder_that_decodes_incrementally_as_a_whole():
    torch.manual_seed(0)
    model = Transformer(STUDENT).eval()
    assert (len(model.encoder.layers), len(model.decoder.layers)) == (3, 1)
    decoder_layer = sum(p.numel() for p in model.decoder.layers[0].parameters())
    assert model.num_parameters() == count_parameters(STUDENT) == count_parameters(SMALL.replace(layers=3)) - 2 * decoder_layer
    src = torch.tensor([[5, 6, 7, 3], [8, 9, 3, 0]])
    tgt = torch.tensor([[2, 10, 11, 12], [2, 13, 14, 15]])
    full = model(src, tgt)
    memory, mask = model.encode(src)
    state = start_decoding(model, memory, mask, beam=1)
    assert len(state.cache.keys) == len(state.memory_kv) == 1  # one decoder layer's keys and values, not the encoder's 3
    for t in range(tgt.size(1)):
        assert torch.allclose(decode_step(model, tgt[:, t], state), full[:, t], atol=1e-5)


def test_a_decoder_as_deep_as_the_encoder_writes_config_json_as_before_decoder_layers_existed():
    old = json.loads(OLD_CONFIG.read_text())["model"]
    config = ModelConfig.from_dict(old)  # no decoder_layers key: the decoder has `layers`
    assert (config.layers, config.decoder_layers) == (2, 2) and config.depth == "2+2"
    assert json.dumps(config.to_dict(), indent=2) == json.dumps(old, indent=2)  # byte for byte, so earlier versions read it
    assert config.replace(decoder_layers=2) == config == ModelConfig.from_dict({**old, "decoder_layers": None})
    assert config.replace(layers=4).decoder_layers == 4  # the decoder follows `layers` unless it was given its own


def test_a_students_decoder_depth_round_trips_and_stays_its_own():
    student = PRESETS["student-tiny"]
    assert (student.layers, student.decoder_layers, student.depth) == (6, 2, "6+2")
    assert student.to_dict()["decoder_layers"] == 2
    assert ModelConfig.from_dict(json.loads(json.dumps(student.to_dict()))) == student
    assert student.replace(layers=4).depth == "4+2"
    assert student.replace(decoder_layers=None).depth == "6+6"


def test_pre_norm_variant_is_a_switch_with_a_final_norm():
    post, pre = Transformer(SMALL), Transformer(SMALL.replace(norm="pre"))
    assert post.encoder.final_norm is None
    assert pre.encoder.final_norm is not None
    assert count_parameters(SMALL.replace(norm="pre")) == count_parameters(SMALL) + 4 * 32


def test_config_round_trips_through_json(tmp_path):
    config = PRESETS["big"].replace(vocab_size=37000, activation="swish")
    config.save(tmp_path / "config.json")
    assert ModelConfig.load(tmp_path / "config.json") == config


@pytest.mark.parametrize("change", [{"d_model": 30}, {"activation": "tanh"}, {"norm": "sandwich"}, {"layers": 0}, {"decoder_layers": 0}])
def test_invalid_configs_are_refused(change):
    with pytest.raises(ValueError):
        SMALL.replace(**change)


@pytest.mark.slow  # fresh Python processes, each importing torch
def test_the_same_weights_are_saved_as_the_same_bytes_in_every_process(tmp_path):
    # safetensors writes metadata in a hash map's order, seeded anew in each process; the files must not differ.
    import hashlib
    import subprocess
    import sys

    script = (
        "import sys, torch; from nmtcli.model.checkpoint import save_weights, load_weights; "
        "save_weights(sys.argv[1], {'b': torch.arange(6.0), 'a': torch.ones(2, 3)}, "
        "{'nmt_config': '{\"d_model\": 512, \"name\": \"ü\"}', 'step': '100', 'run': 'runs/x'}); "
        "assert load_weights(sys.argv[1])['b'].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]"
    )
    digests = set()
    for i in range(5):
        path = tmp_path / f"{i}.safetensors"
        subprocess.run([sys.executable, "-c", script, str(path)], check=True)
        digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
    assert len(digests) == 1


def reference_varlen_attention(q, k, v, query_starts, key_starts, max_q, max_k):
    """The contract of torch.nn.attention.varlen.varlen_attn (a CUDA-only flash kernel) in plain PyTorch.

    Like the kernel, it leaves the key rows past key_starts[-1] unread; their gradient is poisoned with
    NaN (the kernel leaves it unwritten), so a caller that lets it through would show it.
    """
    real = int(key_starts[-1])
    for t in (k, v):
        t.register_hook(lambda g: torch.cat([g[:real], torch.full_like(g[real:], float("nan"))]))
    out = []
    for i in range(len(query_starts) - 1):
        qs, ks = slice(int(query_starts[i]), int(query_starts[i + 1])), slice(int(key_starts[i]), int(key_starts[i + 1]))
        assert ks.stop - ks.start <= max_k and qs.stop - qs.start <= max_q
        heads_first = [t.transpose(0, 1) for t in (q[qs], k[ks], v[ks])]
        out.append(torch.nn.functional.scaled_dot_product_attention(*heads_first).transpose(0, 1))
    return torch.cat(out)


def test_packed_source_attention_equals_the_masked_reference(monkeypatch):
    """On a GPU, attention over the padded source packs the real keys for a flash kernel; same numbers."""
    from nmtcli.model import packed_attention

    torch.manual_seed(0)
    model = Transformer(SMALL)
    src = torch.randint(4, 50, (4, 9))
    for row, length in enumerate([9, 3, 6, 1]):
        src[row, length - 1] = 3
        src[row, length:] = 0
    tgt = torch.randint(4, 50, (4, 7))
    tgt[2, 4:] = 0
    weights = torch.randn(4, 7, 50)

    def run():
        model.zero_grad()
        logits = model(src, tgt)
        (logits * weights).sum().backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    masked_logits, masked_grads = run()
    monkeypatch.setattr(packed_attention, "VARLEN_ATTENTION", reference_varlen_attention)
    monkeypatch.setattr(packed_attention, "applies", lambda attention, x: True)
    packed_logits, packed_grads = run()
    torch.testing.assert_close(packed_logits, masked_logits, rtol=1e-5, atol=1e-5)
    for name, grad in masked_grads.items():
        assert torch.isfinite(packed_grads[name]).all(), name
        torch.testing.assert_close(packed_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)

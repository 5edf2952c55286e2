"""bf16 weights for `features.precision=bf16` (on CUDA by default, on request anywhere), the refusal of a weights
dtype and a precision of different half types, rounding padded lengths up (`pad_to_multiple_of`) and pooled rows
handed back in the store's dtype."""

from __future__ import annotations

import pytest
import torch

from probing.data.records import WordInContext
from probing.errors import ConfigError, ProbingError
from probing.features.encoder import WordEncoder
from probing.features.extraction import extract_split
from probing.features.featurizers import built_featurizer
from probing.features.hf_models import weights_dtype_for
from probing.features.identity import FeatureIdentity
from tests.features.test_decoders import decoders  # noqa: F401 (a fixture)
from tests.features.test_extraction import CLASSES, FakeEncoder, fake_records
from tests.helpers.run_if import run_if
from tests.helpers.runs import compose_job
from tests.helpers.stores import assert_one_line_error

CPU, CUDA = torch.device("cpu"), torch.device("cuda")  # a device object needs no GPU
SENTENCES = [("she", "eats", "the", "apple", "juice", "."), ("the", "oak", "and", "the", "pine", "."),
             ("new", "york", "city", "is", "healthy"), ("a", "larch", ",", "a", "pine", "and", "an", "oak", "tree")]


def records() -> list[WordInContext]:
    """Every word of the sentences as a target: inputs of several lengths in one batch."""
    return [WordInContext(tokens, (i,), tokens[i], "c", f"s{s}:{i}")
            for s, tokens in enumerate(SENTENCES) for i in range(len(tokens))]


def vectors(encoder: WordEncoder, **encode) -> torch.Tensor:
    return encoder.encode([item for item in encoder.prepare_many(records()) if item is not None], **encode)


@pytest.mark.parametrize(("dtype", "precision", "device", "weights"), [
    (None, "bf16", CUDA, "bf16"),  # precision bf16 on CUDA: the weights are loaded in bf16
    (None, "bf16", CPU, "fp32"),  # on a CPU: autocast over float32 weights, as before
    (None, "32", CUDA, "fp32"),
    (None, "16", CUDA, "fp32"),  # fp16 stays autocast (fp32 norms and softmax)
    ("fp32", "bf16", CUDA, "fp32"),  # model.dtype says otherwise: autocast over float32 weights
    ("bf16", "32", CPU, "bf16"),
    ("fp16", "16", CUDA, "fp16"),
])
def test_the_weights_dtype_follows_model_dtype_else_the_precision_on_cuda(dtype, precision, device, weights):
    assert weights_dtype_for(dtype, precision, device) == weights


def test_bf16_weights_with_precision_bf16_load_so_run_without_autocast_and_record_the_weights_dtype(tiny_bert_path):
    fp32 = WordEncoder(str(tiny_bert_path))
    both = WordEncoder(str(tiny_bert_path), dtype="bf16", precision="bf16", allow_emulated_bf16=True)
    weights = WordEncoder(str(tiny_bert_path), dtype="bf16", allow_emulated_bf16=True)
    assert {parameter.dtype for parameter in both.model.parameters()} == {torch.bfloat16}
    assert both.autocast_dtype is None and both.precision == "32"  # no per-call casts of the weights
    assert both.store_kind == weights.store_kind == "mean.weights-bf16"  # the same forward: the same store
    assert both.store_metadata() == weights.store_metadata()
    identity = FeatureIdentity.of_store(both.store_metadata())
    assert (identity.weights_dtype, identity.forward_precision) == ("bf16", None)
    full, half = vectors(fp32), vectors(both)
    torch.testing.assert_close(half, vectors(weights), rtol=0, atol=0)
    # bf16 keeps 8 bits of mantissa: ~2^-8 relative per operation, a few of them through 2 layers
    scale = full.abs().max().item()
    assert 0 < (half - full).abs().max().item() < 0.05 * scale


def test_precision_bf16_on_a_cpu_stays_autocast_over_float32_weights(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path), precision="bf16", allow_emulated_bf16=True)
    assert next(encoder.model.parameters()).dtype == torch.float32 and encoder.autocast_dtype == torch.bfloat16
    assert encoder.store_kind == "mean.bf16" and "weights_dtype" not in encoder.store_metadata()


@pytest.mark.parametrize(("dtype", "precision"), [("bf16", "16"), ("fp16", "bf16")])
def test_weights_and_a_precision_of_different_half_types_are_refused_in_one_line(dtype, precision):
    with pytest.raises(ConfigError) as error:  # before anything is loaded
        WordEncoder("/nonexistent/model", dtype=dtype, precision=precision, device="cuda", allow_emulated_bf16=True)
    assert_one_line_error(str(error.value), f"dtype={dtype} runs the forward in the weights' own {dtype}",
                          f"precision={precision}", f"Fix: precision=32 with dtype={dtype}")


def test_the_refusal_names_the_users_keys(decoders, tmp_path):  # noqa: F811 (the fixture)
    config = compose_job("extract", tmp_path, "model=gpt2", f"model.name_or_path={decoders['gpt2']}",
                         "model.dtype=fp16", "features.precision=bf16", "features.allow_emulated_bf16=true")
    with pytest.raises(ConfigError, match=r"^model\.dtype=fp16 .* features\.precision=bf16 .*Fix: "
                                          r"features\.precision=32 with model\.dtype=fp16"):
        built_featurizer(config.features, config.model)


def test_the_model_presets_leave_the_weights_dtype_to_the_precision(tiny_bert_path, tmp_path):
    config = compose_job("extract", tmp_path, f"model.name_or_path={tiny_bert_path}", "model.num_layers=3",
                         "features.precision=bf16", "features.allow_emulated_bf16=true", "features.device=cpu")
    assert config.model.dtype is None
    encoder = built_featurizer(config.features, config.model)
    assert encoder.dtype == "fp32" and encoder.store_kind == "mean.bf16"  # on the CPU


@pytest.mark.parametrize("multiple", [8, 64])
@pytest.mark.parametrize("settings", [{}, {"attention_window": 1}, {"pooling": "last"}])
def test_padding_to_a_multiple_changes_no_vector(tiny_bert_path, multiple, settings):
    plain = WordEncoder(str(tiny_bert_path), max_length=128, **settings)
    rounded = WordEncoder(str(tiny_bert_path), max_length=128, pad_to_multiple_of=multiple, **settings)
    shapes = []
    rounded.model.register_forward_pre_hook(lambda module, args, kwargs: shapes.append(kwargs["input_ids"].shape),
                                            with_kwargs=True)
    torch.testing.assert_close(vectors(rounded), vectors(plain), rtol=0, atol=1e-6)
    assert shapes[0][1] % multiple == 0 and shapes[0][1] > max(len(tokens) for tokens in SENTENCES) + 2 - multiple
    assert plain.store_metadata() == rounded.store_metadata()  # not part of the features' identity


def test_a_decoders_vectors_do_not_change_with_padding_either(decoders):  # noqa: F811 (the fixture)
    plain = WordEncoder(str(decoders["llama"]))
    rounded = WordEncoder(str(decoders["llama"]), pad_to_multiple_of=16)
    torch.testing.assert_close(vectors(rounded), vectors(plain), rtol=0, atol=1e-6)


def test_the_padded_width_is_rounded_up_within_the_longest_input_the_model_reads(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path), max_length=40, pad_to_multiple_of=16)
    assert [encoder.padded_width(n) for n in (1, 16, 17, 33, 40)] == [16, 16, 32, 40, 40]
    assert WordEncoder(str(tiny_bert_path)).padded_width(13) == 13
    with pytest.raises(ConfigError, match="pad_to_multiple_of=0 is not an integer >= 1"):
        WordEncoder(str(tiny_bert_path), pad_to_multiple_of=0)


def test_pooled_rows_come_back_in_the_dtype_asked_for_as_the_host_would_round_them(tiny_bert_path):
    encoder = WordEncoder(str(tiny_bert_path))
    full, half = vectors(encoder), vectors(encoder, dtype=torch.float16)
    assert half.dtype == torch.float16 and torch.equal(half, full.half())
    assert torch.equal(vectors(encoder, dtype=torch.float32), full)


class Overflowing(FakeEncoder):
    """Features of 1e5 in its second row: finite in float32, inf in float16."""

    def encode(self, batch, dtype=torch.float32):
        pooled = super().encode(batch)
        pooled[1:2] = 1e5
        return pooled.to(dtype)


def test_a_float16_overflow_is_still_named_as_one_by_the_store(tmp_path):
    with pytest.raises(ProbingError, match="exceed the float16 range and would be stored as inf"):
        extract_split(fake_records([3, 3, 3]), Overflowing(), tmp_path / "s.h5", class_names=CLASSES, progress=False)


@pytest.mark.gpu
@run_if(min_gpus=1, bf16_cuda=True)
def test_precision_bf16_on_cuda_loads_bf16_weights_near_float32(tiny_bert_path):
    full = vectors(WordEncoder(str(tiny_bert_path), device="cuda"))
    encoder = WordEncoder(str(tiny_bert_path), device="cuda", precision="bf16")
    assert {parameter.dtype for parameter in encoder.model.parameters()} == {torch.bfloat16}
    assert encoder.autocast_dtype is None and encoder.store_kind == "mean.weights-bf16"
    half = vectors(encoder, dtype=torch.float16)
    scale = full.abs().max().item()
    assert half.dtype == torch.float16 and 0 < (half.float() - full).abs().max().item() < 0.05 * scale
    autocast = WordEncoder(str(tiny_bert_path), device="cuda", precision="bf16", dtype="fp32")
    assert autocast.autocast_dtype == torch.bfloat16 and autocast.store_kind == "mean.bf16"
    padded = WordEncoder(str(tiny_bert_path), device="cuda", pad_to_multiple_of=64)
    torch.testing.assert_close(vectors(padded), full, rtol=0, atol=1e-5)

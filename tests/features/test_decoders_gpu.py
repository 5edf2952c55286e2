"""Causal LMs on CUDA GPUs (marked `gpu`, skipped without one): a tiny Llama sharded by a device_map gives the vectors
of the model on one device, and bf16 weights give Hugging Face's own bf16 forward (TransformerLens #104 is about that
mismatch)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

from probing.features.encoder import WordEncoder
from probing.features.sentence_store import sentence_encoder_of
from tests.features.test_decoders import SENTENCE, record
from tests.helpers.decoders import save_tiny_decoder
from tests.helpers.run_if import cuda_device_count, run_if

pytestmark = [pytest.mark.gpu, run_if(min_gpus=1)]
RECORDS = [record(SENTENCE, (2,)), record("we saw them there .", (3,)), record("the cat sat on the mat .", (1,))]


def sharded_map() -> dict:
    """The tiny Llama's modules over the GPUs there are: its second layer and final norm on the last GPU, or on the
    CPU where there is one GPU (a layer away from the first device either way)."""
    last = cuda_device_count() - 1 if cuda_device_count() > 1 else "cpu"
    return {"embed_tokens": 0, "rotary_emb": 0, "layers.0": 0, "layers.1": last, "norm": last}


@pytest.mark.parametrize("device_map", ["auto", "sharded"])
def test_a_tiny_llama_placed_by_a_device_map_gives_the_single_device_vectors(tmp_path, device_map):
    folder = save_tiny_decoder(tmp_path / "llama", "llama")
    mapping = sharded_map() if device_map == "sharded" else "auto"
    placed = WordEncoder(str(folder), device_map=mapping, device="auto")
    assert placed.device == torch.device("cuda:0")
    if device_map == "sharded":
        assert placed.model.layers[1].mlp.up_proj.weight.device != placed.model.layers[0].mlp.up_proj.weight.device
    single = WordEncoder(str(folder), device="cuda")
    prepared = placed.prepare_many(RECORDS)
    vectors = placed.encode(prepared)
    assert vectors.device.type == "cpu" and vectors.shape == (3, 3, 32)
    torch.testing.assert_close(vectors, single.encode(prepared), rtol=1e-5, atol=1e-5)
    every_word = sentence_encoder_of(placed)  # the every-word stores' encoder gathers its pieces itself
    torch.testing.assert_close(every_word.encode(prepared), vectors, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_half_precision_weights_give_hugging_faces_own_forward_in_that_dtype(tmp_path, dtype):
    folder = save_tiny_decoder(tmp_path / "llama", "llama")
    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype]
    encoder = WordEncoder(str(folder), dtype=dtype, device="cuda")
    prepared = encoder.prepare_many(RECORDS[:1])
    vectors = encoder.encode(prepared)
    reference = AutoModel.from_pretrained(folder, dtype=torch_dtype).to("cuda").eval()
    ids = torch.tensor([prepared[0].input_ids], device="cuda")
    with torch.no_grad():
        hidden = reference(input_ids=ids, attention_mask=torch.ones_like(ids), output_hidden_states=True).hidden_states
    expected = torch.stack([layer[0, prepared[0].target_pieces].float().mean(dim=0) for layer in hidden]).cpu()
    torch.testing.assert_close(vectors[0], expected, rtol=0, atol=1e-6)
    assert not torch.equal(WordEncoder(str(folder), device="cuda").encode(prepared), vectors)

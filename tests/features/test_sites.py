"""Sites caught by forward hooks (probing.features.sites): the residual stream equals Hugging Face's
output_hidden_states on tiny random models of six architectures, the attention and MLP outputs equal a recomputation
of the sub-module on the block's own input, and the blocks above the last asked-for layer do not run."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

from probing.errors import ConfigError
from probing.features.sites import blocks_of, capture, resolve_layers, sub_module

SIZES = {"vocab_size": 97, "max_position_embeddings": 64}
CONFIGS = {
    "bert": lambda: transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                            num_attention_heads=4, **SIZES),
    "llama": lambda: transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                              num_attention_heads=4, num_key_value_heads=2, **SIZES),
    "qwen2": lambda: transformers.Qwen2Config(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                              num_attention_heads=4, num_key_value_heads=2, **SIZES),
    "gemma": lambda: transformers.GemmaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, **SIZES),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                                   num_attention_heads=4, **SIZES),
    "gpt2": lambda: transformers.GPT2Config(vocab_size=97, n_positions=64, n_embd=32, n_layer=3, n_head=4,
                                            bos_token_id=0, eos_token_id=0),
}
DECODERS = [name for name in CONFIGS if name != "bert"]


def tiny(name: str) -> nn.Module:
    torch.manual_seed(0)
    return transformers.AutoModel.from_config(CONFIGS[name]()).eval()


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 97, (2, 7), generator=generator)
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, 5:] = 0  # a padded row
    return ids, mask


@pytest.mark.parametrize("name", list(CONFIGS))
def test_the_residual_stream_is_the_hidden_states_hf_reports(name):
    """Every layer, the last one included (after the final norm where the model has one, as HF reports it), and any
    subset of them in any order."""
    model, (ids, mask) = tiny(name), inputs()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states
        every = capture(model, ids, mask, list(range(4)))
        some = capture(model, ids, mask, [3, 0])
    for layer in range(4):
        torch.testing.assert_close(every[layer], expected[layer], rtol=0, atol=0)
    torch.testing.assert_close(some[0], expected[3], rtol=0, atol=0)
    torch.testing.assert_close(some[1], expected[0], rtol=0, atol=0)


@pytest.mark.parametrize("name", DECODERS)
def test_the_last_layer_of_a_decoder_is_its_final_norm_of_the_last_block(name):
    """Layer L is the final norm's output: the norm applied by hand to the last block's output gives it."""
    model, (ids, mask) = tiny(name), inputs()
    blocks, norm = blocks_of(model)
    assert norm is not None
    outputs = []
    handle = blocks[-1].register_forward_hook(lambda module, args, output: outputs.append(
        output if isinstance(output, torch.Tensor) else output[0]))
    with torch.no_grad():
        [last] = capture(model, ids, mask, [3])
        handle.remove()
        torch.testing.assert_close(last, norm(outputs[0]))
        assert not torch.allclose(last, outputs[0])


def block_input_and_output(model: nn.Module, layer: int, ids: torch.Tensor, mask: torch.Tensor):
    """The input (args, kwargs) and output of block `layer` (1-based) in a plain forward pass."""
    block = blocks_of(model)[0][layer - 1]
    seen = {}
    handle = block.register_forward_hook(
        lambda module, args, kwargs, output: seen.update(args=args, kwargs=kwargs), with_kwargs=True)
    with torch.no_grad():
        model(input_ids=ids, attention_mask=mask, use_cache=False)
    handle.remove()
    return block, seen["args"], seen["kwargs"]


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("site", ["attn", "mlp"])
def test_attention_and_mlp_sites_equal_the_sub_module_recomputed_on_the_blocks_input(name, site):
    """Block 2's sub-module run by hand: its input is the block's input through the block's own norm (and, for the
    MLP of a sequential block, plus the attention output), recomputed here from the block's input alone."""
    model, (ids, mask) = tiny(name), inputs()
    block, args, kwargs = block_input_and_output(model, 2, ids, mask)
    hidden = args[0] if args else kwargs["hidden_states"]
    with torch.no_grad():
        [caught] = capture(model, ids, mask, [2], site)
        [attn] = capture(model, ids, mask, [2], "attn")
        [before] = capture(model, ids, mask, [1])
        torch.testing.assert_close(hidden, before)
        if site == "mlp":
            expected = sub_module(block, "mlp", model)(mlp_input(name, block, hidden, attn))
        else:
            expected = recomputed_attention(name, block, args, kwargs)
    torch.testing.assert_close(caught, expected)


def mlp_input(name: str, block: nn.Module, hidden: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    if name == "gpt_neox":  # parallel residual: the MLP reads the block's input, through its own norm
        return block.post_attention_layernorm(hidden)
    if name == "gpt2":
        return block.ln_2(hidden + attn)
    return block.post_attention_layernorm(hidden + attn)


def recomputed_attention(name: str, block: nn.Module, args: tuple, kwargs: dict) -> torch.Tensor:
    """The attention sub-module on the block's normed input, with the block's own other arguments (mask, cache,
    rotary position embeddings)."""
    norm = getattr(block, "ln_1" if name == "gpt2" else "input_layernorm")
    hidden = args[0] if args else kwargs["hidden_states"]
    extra = {key: value for key, value in kwargs.items() if key != "hidden_states"}
    output = sub_module(block, "attn", block)(norm(hidden), *args[1:], **extra)
    return output if isinstance(output, torch.Tensor) else output[0]


@pytest.mark.parametrize("name", ["llama", "gpt2", "bert"])
@pytest.mark.parametrize(("layers", "site", "started"), [([0], "resid", [1]), ([0, 1], "resid", [1]),
                                                        ([2], "resid", [1, 2]), ([1], "attn", [1]),
                                                        ([3, 1], "resid", [1, 2, 3])])
def test_the_forward_stops_after_the_last_asked_for_layer(name, layers, site, started):
    """Counted by hooks on every block: the blocks above the last asked-for layer never start (layer 0 is caught
    as block 1 starts, block 1's attention inside it); the hooks are removed, and the model then runs whole."""
    model, (ids, mask) = tiny(name), inputs()
    seen = []
    blocks, _ = blocks_of(model)
    handles = [block.register_forward_pre_hook(lambda module, args, number=number: seen.append(number))
               for number, block in enumerate(blocks, 1)]
    with torch.no_grad():
        capture(model, ids, mask, layers, site)
        assert seen == started
        seen.clear()
        model(input_ids=ids, attention_mask=mask)
    assert seen == [1, 2, 3]
    for handle in handles:
        handle.remove()
    assert not any(module._forward_hooks or module._forward_pre_hooks for module in model.modules())


def test_layers_and_sites_are_checked_in_one_line():
    assert resolve_layers(None, 4) == [0, 1, 2, 3]
    assert resolve_layers(None, 4, "mlp") == [1, 2, 3]
    assert resolve_layers([2, -1, 0, 2], 4) == [0, 2, 3]
    fix = r"Fix: layers=null for all, or a list within 0\.\.3$"
    with pytest.raises(ConfigError, match=r"^layers=4 is not a layer of this model.*" + fix) as raised:
        resolve_layers([0, 4], 4)
    assert "\n" not in str(raised.value)
    with pytest.raises(ConfigError, match="layers holds layer 0, the embeddings, which have no attn output"):
        resolve_layers([0, 1], 4, "attn")
    with pytest.raises(ConfigError, match=r"^layers=\[\] is not a list of layers"):
        resolve_layers([], 4)
    with pytest.raises(ConfigError, match=r"site=mlp: a block of BertModel \(BertLayer\) has no mlp/feed_forward"):
        capture(tiny("bert"), *inputs(), [1], "mlp")
    with pytest.raises(ValueError, match=r"layers must be distinct, got \[1, 1\]"):
        capture(tiny("llama"), *inputs(), [1, 1])


def test_an_unknown_architecture_is_one_clear_line():
    with pytest.raises(ConfigError, match=r"^Sequential: no list of transformer blocks found .*Fix: a model of a "
                                          r"known architecture \(BERT-like"):
        blocks_of(nn.Sequential(nn.Linear(2, 2)))

"""Where in a transformer the features are read (`capture`): the residual stream between blocks, or a block's
attention or MLP output, caught by forward hooks on the asked-for layers only, the forward stopped after the last
of them. Which module each site and layer is, per architecture, and what layer L means: docs/features.md, 'Sites
and layers'."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from probing.errors import ConfigError, setting
from probing.features.layers import resolve_layer

RESIDUAL, ATTENTION, MLP = "resid", "attn", "mlp"
SITES = (RESIDUAL, ATTENTION, MLP)
# Where an architecture keeps its blocks (on the base model, or on its encoder/decoder), the sub-modules of a block,
# and the norm its base model applies after the last block (whose output HF reports as the last hidden state).
BLOCK_LISTS = ("layers", "h", "layer", "blocks")
BLOCK_OWNERS = ("encoder", "decoder", "transformer", "model")
SUB_MODULES = {ATTENTION: ("self_attn", "attn", "attention", "self_attention"), MLP: ("mlp", "feed_forward")}
FINAL_NORMS = ("norm", "ln_f", "final_layer_norm", "final_norm")
KNOWN = "BERT-like encoders, Llama, Qwen2, Gemma, GPT-NeoX/Pythia, GPT-2"


class _Stop(Exception):
    """Raised by the hook of the last asked-for layer: the rest of the forward pass is not run."""


def parse_site(site: Any) -> str:
    if site not in SITES:
        raise ConfigError(f"{setting('site')}={site!r} is not a site. Fix: {setting('site')}=resid (the residual "
                          f"stream after each block), attn (a block's attention output) or mlp (its MLP output)")
    return site


def blocks_of(model: nn.Module) -> tuple[nn.ModuleList, nn.Module | None]:
    """The model's transformer blocks, in order, and the norm its base model applies after the last one (None: the
    last block's output is the last hidden state, as in BERT)."""
    base = getattr(model, "base_model", model)
    count = getattr(getattr(model, "config", None), "num_hidden_layers", None)
    for owner in (base, *(getattr(base, name, None) for name in BLOCK_OWNERS)):
        for name in BLOCK_LISTS if isinstance(owner, nn.Module) else ():
            blocks = getattr(owner, name, None)
            if isinstance(blocks, nn.ModuleList) and len(blocks) > 0 and count in (None, len(blocks)):
                norm = next((getattr(owner, norm) for norm in FINAL_NORMS
                             if isinstance(getattr(owner, norm, None), nn.Module)), None)
                return blocks, norm
    raise ConfigError(f"{type(model).__name__}: no list of transformer blocks found (looked for "
                      f"{'/'.join(BLOCK_LISTS)}), so its sites cannot be hooked. Fix: a model of a known architecture "
                      f"({KNOWN})")


def sub_module(block: nn.Module, site: str, model: nn.Module) -> nn.Module:
    """The attention (`attn`) or MLP (`mlp`) sub-module of `block`."""
    names = SUB_MODULES[site]
    found = next((getattr(block, name) for name in names if isinstance(getattr(block, name, None), nn.Module)), None)
    if found is None:
        raise ConfigError(f"{setting('site')}={site}: a block of {type(model).__name__} ({type(block).__name__}) has "
                          f"no {'/'.join(names)} sub-module. Fix: {setting('site')}=resid")
    return found


def resolve_layers(layers: Any, num_hidden_states: int, site: str = RESIDUAL,
                   model: str = "this model") -> list[int]:
    """The asked-for `layers` (None: all of them) as sorted hidden-state indices 0..L (negative ones count from the
    top). The attention and MLP sites are those of blocks 1..L: layer 0 (the embeddings) has neither."""
    first = 0 if site == RESIDUAL else 1
    if layers is None:
        return list(range(first, num_hidden_states))
    if isinstance(layers, (int, str)) or not isinstance(layers, Sequence) or not layers:
        raise ConfigError(f"{setting('layers')}={layers!r} is not a list of layers. Fix: {setting('layers')}=null "
                          f"for all, or a list such as [0,{num_hidden_states - 1}]")
    resolved = sorted({resolve_layer(layer, num_hidden_states, setting("layers"), model,
                                     fix=f"{setting('layers')}=null for all, or a list within "
                                         f"0..{num_hidden_states - 1}") for layer in layers})
    if resolved[0] < first:
        raise ConfigError(f"{setting('layers')} holds layer 0, the embeddings, which have no {site} output (blocks "
                          f"are layers 1..{num_hidden_states - 1}). Fix: leave 0 out, or {setting('site')}=resid")
    return resolved


def hook_points(model: nn.Module, layers: Sequence[int], site: str) -> list[tuple[nn.Module, bool]]:
    """(module, whether its input rather than its output is the state) of each layer: at the residual stream, layer 0
    is the first block's input (the embedding output as the blocks get it), layer l < L block l's output and layer L
    the last hidden state (after the final norm where the model has one); at `attn`/`mlp`, block l's sub-module."""
    blocks, norm = blocks_of(model)
    if len(set(layers)) != len(layers):
        raise ValueError(f"layers must be distinct, got {list(layers)}")
    points = []
    for layer in layers:
        if not 0 <= layer <= len(blocks):
            raise ValueError(f"layer {layer} is not a hidden state of a model with {len(blocks)} blocks")
        if site != RESIDUAL:
            points.append((sub_module(blocks[layer - 1], site, model), False))
        elif layer == 0:
            points.append((blocks[0], True))
        else:
            points.append((norm if layer == len(blocks) and norm is not None else blocks[layer - 1], False))
    return points


def _state(value: Any) -> Tensor:
    """The hidden states in a module's output: the output itself, or its first item (a tuple, a ModelOutput)."""
    return value if isinstance(value, Tensor) else value[0]


def capture(model: nn.Module, input_ids: Tensor, attention_mask: Tensor | None, layers: Sequence[int],
            site: str = RESIDUAL, out_device: torch.device | None = None, **forward: Any) -> list[Tensor]:
    """The (B, T, D) states of `model` at `site` of each of `layers` (distinct hidden-state indices, see
    `hook_points`), in the order of `layers`, from one forward pass that stops once the last of them is caught;
    `out_device`: where the states are put (None: where each layer computed them). `forward`: more arguments of the
    model's forward pass."""
    points = hook_points(model, layers, site)
    caught: dict[int, Tensor] = {}
    last = max(range(len(layers)), key=lambda index: layers[index])

    def hook_of(index: int):
        def keep(state: Tensor) -> None:
            caught[index] = state.detach() if out_device is None else state.detach().to(out_device)
            if index == last:
                raise _Stop

        def before(module: nn.Module, args: tuple, kwargs: dict) -> None:
            keep(args[0] if args else kwargs["hidden_states"])

        def after(module: nn.Module, args: tuple, output: Any) -> None:
            keep(_state(output))
        return before, after

    handles = []
    try:
        for index, (module, on_input) in enumerate(points):
            before, after = hook_of(index)
            handles.append(module.register_forward_pre_hook(before, with_kwargs=True) if on_input
                           else module.register_forward_hook(after))
        with contextlib.suppress(_Stop):
            model(input_ids=input_ids, attention_mask=attention_mask, **_quiet(model), **forward)
    finally:
        for handle in handles:
            handle.remove()
    if len(caught) != len(layers):
        raise RuntimeError(f"the forward pass of {type(model).__name__} did not run the hooks of every asked-for "
                           f"layer ({len(caught)} of {len(layers)} caught)")
    return [caught[index] for index in range(len(layers))]


def _quiet(model: nn.Module) -> dict[str, Any]:
    """No hidden states, attentions or key/value cache kept by the model itself: the hooks keep what is asked for."""
    parameters = inspect.signature(model.forward).parameters
    quiet = {"output_hidden_states": False, "output_attentions": False, "use_cache": False}
    takes_any = any(parameter.kind is inspect.Parameter.VAR_KEYWORD for parameter in parameters.values())
    return {key: value for key, value in quiet.items() if key in parameters or takes_any}

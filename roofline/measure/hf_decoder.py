"""Hugging Face transformers as a second engine for `validate` and `measure --engine transformers`.

The model is built from a config with random weights (no download): the family's own classes (Llama,
Qwen2, Mistral, GPT-2) at the spec's shapes, SDPA attention, the default dynamic cache, greedy tokens from
a plain loop of forward calls — what a user timing transformers' eager decode sees. transformers is an
optional dependency (`pip install 'roofline[engines]'`), imported only here.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from roofline.errors import RooflineError
from roofline.measure.decoder import TORCH_DTYPES

FAMILIES = ("llama", "qwen2", "mistral", "gpt2")


def transformers_module():
    """Import transformers, or say which extra installs it."""
    try:
        import transformers
    except ImportError:
        raise RooflineError("the transformers engine needs transformers: pip install 'roofline[engines]'") from None
    return transformers


def family(arch) -> str:
    """The transformers model_type whose classes build this architecture."""
    if arch.position_embeddings == "learned":
        return "gpt2"
    return "qwen2" if arch.bias == "qkv" else "llama"


def config(arch, max_tokens: int):
    """The transformers config of `arch` (its family's class), with room for `max_tokens` positions."""
    t = transformers_module()
    if family(arch) == "gpt2":
        return t.GPT2Config(
            vocab_size=arch.vocab_size,
            n_positions=max(arch.max_positions or 0, max_tokens),
            n_embd=arch.hidden_size,
            n_layer=arch.layers,
            n_head=arch.num_heads,
            n_inner=arch.intermediate_size,
            tie_word_embeddings=True,
            bos_token_id=0,
            eos_token_id=0,
        )  # GPT-2's 50256 lies outside a tiny vocabulary
    kind = t.Qwen2Config if family(arch) == "qwen2" else t.LlamaConfig
    return kind(
        vocab_size=arch.vocab_size,
        hidden_size=arch.hidden_size,
        intermediate_size=arch.intermediate_size,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.num_heads,
        num_key_value_heads=arch.num_kv_heads,
        head_dim=arch.head_dim,
        max_position_embeddings=max(max_tokens, 2048),
        tie_word_embeddings=arch.tied_embeddings,
    )


class TransformersDecoder:
    """prefill / decode through a transformers causal LM; the same interface as roofline.measure.decoder.Decoder."""

    def __init__(self, arch, dtype: str, device: str, batch: int, max_tokens: int, model: Any = None):
        import torch

        t = transformers_module()
        self.a, self.device, self.batch = arch, torch.device(device), batch
        if model is None:
            torch.manual_seed(0)
            model = t.AutoModelForCausalLM.from_config(
                config(arch, max_tokens), attn_implementation="sdpa", dtype=getattr(torch, TORCH_DTYPES[dtype])
            )
            model = model.to(self.device).eval()
        self.model, self.past = model, None
        # transformers >= 5.x names the cache argument `cache`, earlier releases `past_key_values`
        self.cache_name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"

    def shared_weights(self) -> Any:
        return self.model

    def parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    def _forward(self, tokens, past):
        """One forward call as generate() makes it: the last position's logits only, the cache carried along."""
        name = self.cache_name
        out = self.model(
            input_ids=tokens, use_cache=True, logits_to_keep=1, **({name: past} if past is not None else {})
        )
        self.past = getattr(out, name)
        return out.logits[:, -1].argmax(-1)

    def prefill(self, tokens):
        return self._forward(tokens, None)

    def decode(self, token, position: int):
        return self._forward(token[:, None], self.past)


def builder(model) -> Callable[..., TransformersDecoder]:
    """build(arch, dtype, device, batch, max_tokens, weights) for validate's rounds (weights: the built model)."""
    transformers_module()
    return lambda a, dtype, device, batch, tokens, weights: TransformersDecoder(
        a, dtype, device, batch, tokens, weights
    )

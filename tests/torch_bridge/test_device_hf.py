"""Hugging Face transformers models built from a config with random weights (no download) on the npu
device: GPT2LMHeadModel and LlamaForCausalLM (grouped-query attention), forward logits and one
training step (loss.backward + stock torch.optim.AdamW) against the same model on the CPU.

Both use transformers' default "sdpa" attention, which runs on the flash attention kernels
(torch_bridge.device.attention: causal without a mask, or the bool padding mask). A training step
without padding runs every op on a kernel. With a padding mask, transformers builds the mask with
advanced indexing (`padding_mask[batch_idx, kv_idx]`, aten::index.Tensor), which has no npu kernel
and falls back to the CPU (once per forward, outside the layers): the only fallback, listed in
HF_FALLBACKS.

Tolerance: as tests/torch_bridge/test_device_models.py: f32 kernels summing in another order, so
logits, the loss and gradients at rtol = 1e-4, atol = 1e-6 (seen: logits <= 2e-7, loss <= 5e-7,
gradients <= 6e-8), and weights after the AdamW step at atol = lr (a gradient within rounding noise
of 0 turns into a different fraction of one step; seen: <= 8e-6 with lr = 1e-3).
"""
from __future__ import annotations

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

import torch_bridge

VOCAB, LR = 128, 1e-3
#: ops that may fall back in these models, and why (see the module docstring)
HF_FALLBACKS = {"aten::index.Tensor_out"}


def _gpt2() -> torch.nn.Module:
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0,
                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    return GPT2LMHeadModel(cfg)


def _llama() -> torch.nn.Module:
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0,
                      eos_token_id=0)
    return LlamaForCausalLM(cfg)


MODELS = {"gpt2": _gpt2, "llama": _llama}


def _new_fallbacks(before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in torch_bridge.fallback_ops().items() if v != before.get(k, 0)}


def _twins(name: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    ref = MODELS[name]()
    assert ref.config._attn_implementation == "sdpa"
    return copy.deepcopy(ref).npu(), ref


@pytest.mark.parametrize("name", list(MODELS))
def test_forward_logits_match_cpu(name):
    model, ref = _twins(name)
    model.eval()
    ref.eval()
    ids = torch.randint(0, VOCAB, (2, 16))
    mask = torch.ones(2, 16, dtype=torch.long)
    mask[1, :5] = 0                                     # left padding in the second row
    before = torch_bridge.fallback_ops()
    with torch.no_grad():
        plain = model(input_ids=ids.npu()).logits
        assert _new_fallbacks(before) == {}
        padded = model(input_ids=ids.npu(), attention_mask=mask.npu()).logits
        assert set(_new_fallbacks(before)) <= HF_FALLBACKS
        assert plain.is_npu and padded.is_npu
        torch.testing.assert_close(plain.cpu(), ref(input_ids=ids).logits, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(padded.cpu(), ref(input_ids=ids, attention_mask=mask).logits, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", list(MODELS))
def test_one_training_step_matches_cpu(name):
    model, ref = _twins(name)
    ids = torch.randint(0, VOCAB, (2, 16))
    results = []
    before = torch_bridge.fallback_ops()
    for m, dev in ((model, "npu"), (ref, "cpu")):
        m.train()
        opt = torch.optim.AdamW(m.parameters(), lr=LR)
        loss = m(input_ids=ids.to(dev), labels=ids.to(dev)).loss
        loss.backward()
        grads = [p.grad.cpu() for p in m.parameters()]
        opt.step()
        results.append((loss.item(), grads))
        if dev == "npu":
            assert _new_fallbacks(before) == {}         # the whole step on kernels
    (loss, grads), (ref_loss, ref_grads) = results
    torch.testing.assert_close(loss, ref_loss, rtol=1e-4, atol=1e-6)
    names = [n for n, _ in model.named_parameters()]
    for n, g, r in zip(names, grads, ref_grads):
        torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-6, msg=lambda m: f"{n}.grad: {m}")
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.is_npu
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=LR, msg=lambda m: f"{n}: {m}")

"""Models trained on torch.ops.npu (MLP, CNN, GPT-style decoder) next to their stock-torch twins, with the
shared training loop and synthetic data (`examples.models.common`). Run one: `python examples/models/gpt.py`."""

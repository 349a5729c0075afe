"""torch.library ops in namespace npu, autograd, the npu device (later issues)."""

"""Fused Triton kernels, each with the PyTorch reference it must match and a dispatch that falls back to it."""

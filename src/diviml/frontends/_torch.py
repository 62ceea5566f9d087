"""torch, imported where a front end first needs it, with a clear error when it is not installed."""

from __future__ import annotations

from ..errors import InputError


def import_torch():
    """The torch module; InputError naming the extra to install when it is missing."""
    try:
        import torch
    except ImportError:
        raise InputError("the PyTorch front end needs torch: pip install 'diviml[torch]'") from None
    return torch


def float32_in_full(torch) -> None:
    """Make CUDA run float32 matrix products and convolutions in float32, not TF32 (cuDNN's default for
    convolutions): a profile then times the kernels a run uses, and a program split between this CPU and a
    GPU gives the CPU's outputs within float32's tolerance. Set for the whole process, as torch's own flags are.

    Through the flags torch has long had: the newer per-backend ``fp32_precision`` settings, set for
    convolutions alone, leave cuDNN's convolution and RNN settings apart, and torch.export (which reads the
    cuDNN flag as one) then fails, so every later capture would fall back to torch.fx."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False

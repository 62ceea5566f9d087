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

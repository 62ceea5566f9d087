"""Frontends: turn outside formats (NeurIPS 2020 scenarios, PyTorch models) into diviml problems."""

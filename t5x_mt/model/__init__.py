"""The encoder-decoder Transformer: its config (`network`), layers, parameter layout,
language-specific adapters, the translation model's loss and decoder steps (`models`),
losses, FLOPs and the decode cache a search drives.

May import core and kernels.
"""

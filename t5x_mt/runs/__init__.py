"""A run folder (MODEL_DIR): where each file lives (`run_layout`), its vocabulary, its
Orbax checkpoints, averages of checkpoints and its training curve.

May import core, kernels, model and data.
"""

"""The gin edge: the names recipes bind (`configurables`, `gin_model`), gin files and
bindings parsed with errors users can act on (`gin_utils`), and a saved run read back
from its config.gin into a translator (`run_loading`).

Nothing below this package reads gin. May import every package but export and
pretrained.
"""

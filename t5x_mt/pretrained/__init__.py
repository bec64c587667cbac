"""Pretrained checkpoints of other toolkits as t5x_mt runs (launch/import_checkpoint.py)."""

"""Pretrained checkpoints of other toolkits as t5x_mt runs (launch/import_checkpoint.py):
Hugging Face's NLLB-200, M2M-100 and OPUS-MT (`huggingface`) and their tokenizers
(`hf_vocabulary`).

May import every package.
"""

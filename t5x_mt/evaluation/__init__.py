"""Scores: sacreBLEU's BLEU, spBLEU and chrF++ per direction and category, the eval files
(`scoring`), the per-direction evaluation of a model that the training loop and
launch/evaluate.py share with its settings (`per_direction`), and the diacritic accuracy
of Yoruba tone-mark restorers.

May import core, kernels, model, data, runs and decoding.
"""

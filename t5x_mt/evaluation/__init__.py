"""Scores: sacreBLEU's BLEU, spBLEU and chrF++ per direction and category, the eval files
(`scoring`), and diacritic accuracy of Yoruba tone-mark restorers.

May import core, kernels, model, data, runs and decoding.
"""

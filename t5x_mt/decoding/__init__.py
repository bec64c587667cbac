"""From a model to text: the search methods (`search`), prediction over any step-wise
model, the translator (`inference`: tags, batching, pivots, family routing), ensembles,
n-best lists, reranking and MBR, scoring given pairs, Yoruba tone marks restored on
outputs, and back-translation of monolingual text.

May import core, kernels, model, data and runs.
"""

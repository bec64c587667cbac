"""t5x_mt: multilingual machine translation in JAX/Flax.

The library is layered; each package imports only the packages before it in this list
(`tests/test_import_graph.py` holds the order), and its own docstring says what it owns:

  core        errors, files, languages and directions, processes, meshes, progress, the
              commands' shared edge: no machine-learning ideas
  kernels     attention kernels behind one entry point
  model       the encoder-decoder, its layers, parameter layout, adapters, losses, FLOPs
              and decode cache
  data        corpora, cleaning, vocabularies, tags, sampling, selection, input pipelines
  runs        a run folder: its layout, vocabulary, checkpoints and averages
  decoding    search methods, prediction, translators, ensembles, n-best lists, reranking
  evaluation  sacreBLEU metrics and the per-direction evaluation of a model, its settings
  training    settings, the train step, the loop and its actions, DRO, fine-tuning
  config      the gin edge: the names recipes bind, and runs loaded back from their config
  export, pretrained   other toolkits' formats, out (CTranslate2) and in (Hugging Face)
"""

"""Trained runs in serving formats.

  ctranslate2_spec        the model as CTranslate2's TransformerSpec (architecture, weights,
                          vocabulary), or one line saying why it has no CTranslate2 form
  ctranslate2_export      a run's checkpoint written as a CTranslate2 model folder
  ctranslate2_translator  translates with such a folder through the Translator interface
  export_folder           what an export wrote into its folder, and what a later one may
                          replace there

May import every package but pretrained.
"""

# CTranslate2 weight types: float32; int8 (int8 weights and products, float32 elsewhere on
# a CPU); int8_float32 (the same, named for what the rest computes in); float16 (for GPUs;
# a CPU computes it in float32).
CTRANSLATE2_QUANTIZATIONS = ('float32', 'int8', 'int8_float32', 'float16')

"""The model's gin binding on its own: gin/models/*.gin read without the data pipeline
(seqio, TensorFlow) that `t5x_mt.config.configurables` binds with it, so a host that runs the model
alone, such as an accelerator machine timing the train step and beam search, can read
the project's model files."""

import gin

from t5x_mt.model import network

_model_config = gin.external_configurable(network.TransformerConfig, module='network')


def model_config(vocab_size: int) -> network.TransformerConfig:
  """The bound model (gin/models/*.gin) with the run's embedding rows."""
  return _model_config(vocab_size=vocab_size)

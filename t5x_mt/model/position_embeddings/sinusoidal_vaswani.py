"""Fixed sinusoids with the frequencies of Vaswani et al. (2017), 10000^(-2i/d), as Marian
(OPUS-MT) computes them: the layout of `sinusoidal`, timescales spread over half steps."""

from t5x_mt.model.position_embeddings.sinusoidal import Sinusoids


class VaswaniSinusoids(Sinusoids):
  name = 'sinusoidal_vaswani'
  huggingface_model_types = ('marian',)

  def timescale_steps(self, half: int) -> int:
    return half


VASWANI_SINUSOIDS = VaswaniSinusoids()

"""Position embeddings by name: what `TransformerConfig.position_embedding` (the macro
POSITION_EMBEDDING) chooses. Registered: 'learned', 'sinusoidal' (tensor2tensor's and
fairseq's sinusoids), 'sinusoidal_vaswani' (the paper's and Marian's) and 'relative'
(Shaw et al.'s tables), one module each; `base.PositionEmbedding` says what a variant
answers. A new variant is a module with a `PositionEmbedding` subclass and one `register`
call here.
"""

from typing import Any

from t5x_mt.core.errors import UserError
from t5x_mt.core.registry import Registry
from t5x_mt.model.position_embeddings.base import FieldName
from t5x_mt.model.position_embeddings.base import PositionEmbedding
from t5x_mt.model.position_embeddings.learned import LEARNED
from t5x_mt.model.position_embeddings.relative import RELATIVE
from t5x_mt.model.position_embeddings.sinusoidal import SINUSOIDS
from t5x_mt.model.position_embeddings.sinusoidal_vaswani import VASWANI_SINUSOIDS

__all__ = ['DEFAULT', 'PositionEmbedding', 'REGISTRY', 'check', 'get', 'names', 'register']

REGISTRY: Registry[PositionEmbedding] = Registry('position embedding')
register = REGISTRY.register
get = REGISTRY.get
names = REGISTRY.names

register(LEARNED)
register(SINUSOIDS)
register(VASWANI_SINUSOIDS)
register(RELATIVE)
DEFAULT = LEARNED.name  # TransformerConfig's.


def check(config: Any, field_name: FieldName) -> None:
  """A UserError where `config`'s position settings do not hold together: a switch
  another variant owns, or what its own variant checks."""
  chosen = get(config.position_embedding)
  for variant in REGISTRY:
    for setting in variant.exclusive_settings:
      if variant.name != chosen.name and getattr(config, setting):
        raise UserError(f'{field_name(setting)}: needs position_embedding = '
                        f'{variant.name!r}, not {chosen.name!r}')
  chosen.check(config, field_name)

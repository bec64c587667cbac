"""Norm placements by name: what `TransformerConfig.layer_norm` (the macro LAYER_NORM)
chooses. Registered: 'pre' (pre-LN), 'post' (post-LN) and 'post_b2t' (post-LN with B2T's
bottom-to-top connection), one module each; `base.NormPlacement` says what a placement
answers. A new placement is a module with a `NormPlacement` subclass and one `register`
call here.
"""

from t5x_mt.core.registry import Registry
from t5x_mt.model.norm_placements.base import NormPlacement
from t5x_mt.model.norm_placements.base import Sublayer
from t5x_mt.model.norm_placements.post import POST_LN
from t5x_mt.model.norm_placements.post_b2t import POST_B2T
from t5x_mt.model.norm_placements.pre import PRE_LN

__all__ = ['DEFAULT', 'NormPlacement', 'REGISTRY', 'Sublayer', 'get', 'names', 'register']

REGISTRY: Registry[NormPlacement] = Registry('norm placement')
register = REGISTRY.register
get = REGISTRY.get
names = REGISTRY.names

register(PRE_LN)
register(POST_LN)
register(POST_B2T)
DEFAULT = PRE_LN.name  # TransformerConfig's: the WMT systems' pre-LN.

"""Tests for t5x_mt.model.flops: hand-counted FLOPs, the 2-per-weight rule, XLA's own count."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.model import flops
from t5x_mt.model import models
from t5x_mt.model import network

TINY = network.TransformerConfig(
    vocab_size=20, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32, num_encoder_layers=2,
    num_decoder_layers=2, max_length=16)
# Large enough that matmuls dominate the elementwise work that XLA also counts.
SMALL = network.TransformerConfig(
    vocab_size=256, emb_dim=128, num_heads=4, head_dim=32, mlp_dim=512, num_encoder_layers=1,
    num_decoder_layers=1, max_length=64)


def test_tiny_config_matches_hand_count():
  # D = 16, A = 2 * 8 = 16, F = 32, V = 20, Le = 5, Ld = 4, two layers per side.
  counted = flops.forward_flops(TINY, inputs_length=5, targets_length=4)
  # 2 layers * 2 * (4*16*16 + 2*16*32) * 5 source tokens.
  assert counted.encoder_dense == 2 * 2 * (1024 + 1024) * 5 == 40960
  # 2 layers * 4 * 16 * 5 * 5.
  assert counted.encoder_attention == 3200
  # 2 layers * 2 * ((6*16*16 + 2*16*32) * 4 target + (2*16*16) * 5 source tokens).
  assert counted.decoder_dense == 2 * 2 * (2560 * 4 + 512 * 5) == 51200
  # 2 layers * 4 * 16 * 4 * (4 + 5).
  assert counted.decoder_attention == 4608
  # 2 * 16 * 20 * 4.
  assert counted.logits == 2560
  assert counted.total == 102528
  assert flops.train_flops_per_step(TINY, 3, 5, 4) == 3 * 3 * 102528
  assert flops.train_flops_per_target_token(TINY, 5, 4) == 3 * 102528 / 4


def test_dense_flops_are_two_per_weight_matrix_entry_per_token():
  # With one source and one target token every weight matrix of the model (kernels and the
  # shared embedding, used once as the output projection) meets exactly one token.
  params = nn.meta.unbox(models.abstract_variables(SMALL))['params']
  matrix_weights = sum(np.prod(leaf.shape) for path, leaf in
                       jax.tree_util.tree_leaves_with_path(params)
                       if jax.tree_util.keystr(path).endswith(("['kernel']", "['embedding']"))
                       and 'posembed' not in jax.tree_util.keystr(path))
  counted = flops.forward_flops(SMALL, inputs_length=1, targets_length=1)
  assert counted.encoder_dense + counted.decoder_dense + counted.logits == 2 * matrix_weights


def _xla_flops(function, *args) -> float:
  """XLA's FLOP count of the lowered (not yet optimised) program; nothing is compiled."""
  analysis = jax.jit(function).lower(*args).cost_analysis()
  return float((analysis[0] if isinstance(analysis, list) else analysis)['flops'])


def test_xla_cost_analysis_agrees_within_three_percent():
  # XLA also counts norms, softmax and other elementwise ops, so it is a little above ours.
  batch_size, inputs_length, targets_length = 2, 24, 16
  model = network.Transformer(SMALL)
  params = nn.meta.unbox(models.abstract_variables(SMALL))['params']
  inputs = jax.ShapeDtypeStruct((batch_size, inputs_length), jnp.int32)
  targets = jax.ShapeDtypeStruct((batch_size, targets_length), jnp.int32)

  def forward(p, source, target):
    return model.apply({'params': p}, source, target, target)

  def loss(p, source, target):
    return jnp.square(forward(p, source, target)).sum()

  ours_forward = batch_size * flops.forward_flops(SMALL, inputs_length, targets_length).total
  forward_ratio = _xla_flops(forward, params, inputs, targets) / ours_forward
  assert 1.0 <= forward_ratio < 1.03
  ours_train = flops.train_flops_per_step(SMALL, batch_size, inputs_length, targets_length)
  train_ratio = _xla_flops(jax.grad(loss), params, inputs, targets) / ours_train
  assert 1.0 <= train_ratio < 1.05


def test_per_side_widths_and_relative_tables_count_by_hand():
  # Encoder F = 64, decoder F = 8; relative keys and values (k = 2, R = 5) in both stacks.
  config = dataclasses.replace(TINY, encoder_mlp_dim=64, decoder_mlp_dim=8,
                               position_embedding='relative', relative_max_distance=2,
                               relative_in_decoder=True)
  counted = flops.forward_flops(config, inputs_length=5, targets_length=4)
  assert counted.encoder_dense == 2 * 2 * (4 * 16 * 16 + 2 * 16 * 64) * 5
  assert counted.decoder_dense == 2 * 2 * ((6 * 16 * 16 + 2 * 16 * 8) * 4 + 512 * 5)
  # 2 layers * (4 * 16 * 5 * 5 + 2 tables * 2 * 16 * 5 rows * 5 positions).
  assert counted.encoder_attention == 2 * (1600 + 1600)
  keys_only = flops.forward_flops(dataclasses.replace(config, relative_values=False), 5, 4)
  assert keys_only.decoder_attention == 2 * (4 * 16 * 4 * 9 + 2 * 16 * 5 * 4)

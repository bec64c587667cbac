"""Model FLOPs of the encoder-decoder Transformer, per training step and per target token.

These are the numerator of MFU (model FLOPs utilisation): FLOPs the model needs by its
definition, not what a particular kernel executes, so recomputation or a faster kernel never
changes them. The accounting is the standard one (Kaplan et al. 2020; PaLM, appendix B),
split by side because source and target rows have their own lengths. With D = emb_dim,
A = num_heads * head_dim, F = the side's mlp width, V = vocab_size, and a row of Le source
and Ld target positions, a forward pass costs (a multiply-add is 2 FLOPs):

  encoder dense      per layer: 2 * (4*D*A + 2*D*F) * Le        (q, k, v, out; MLP in, out)
  encoder attention  per layer: 4 * A * Le * Le                 (scores q.k and weighted sum p.v)
                                + P(Le)                         (positions, see below)
  decoder dense      per layer: 2 * (4*D*A + 2*D*A + 2*D*F) * Ld  (self q, k, v, out; cross q,
                                + 2 * (2*D*A) * Le                 out; MLP) + cross k, v
  decoder attention  per layer: 4 * A * Ld * Ld + 4 * A * Ld * Le  (self; cross)
                                + P(Ld)                         (the decoder's positions)
  logits:                       2 * D * V * Ld

A language model (`decoder_only`) has no encoder layers and no cross-attention terms.

P(L) is what a stack's position embedding adds to a self-attention layer over L positions
(`PositionEmbedding.self_attention_flops`). Shaw's relative positions (R = 2k + 1 table
rows, T = 2 tables with values, 1 keys only) cost what their shared tables need, every
query times every key row and each query's probabilities, summed per row, times every
value row: P(L) = 2 * T * A * R * L. Absolute positions, added to the embeddings, add
none, and neither do norm placements.

The dense terms are 2 FLOPs per weight per token that meets the weight, i.e. the "6 N" rule
once training's factor 3 is applied. Training costs 3 x forward: the backward pass computes
the gradients of activations and of weights, each costing one forward matmul.

Conventions: every position of a row counts, since packed rows are full and padding is
computed anyway; causal self-attention counts the full Ld x Ld square, as the dense XLA
kernel computes it (a block-skipping flash kernel does less work for the same model FLOPs).
Not counted, being O(tokens * D) rather than O(tokens * weights): embedding lookups (gathers),
norms, softmax, activations, biases, dropout, the loss and the optimizer update.
"""

import dataclasses

from t5x_mt.model import network

TRAIN_FORWARD_MULTIPLE = 3  # Forward + backward (activation and weight gradients).


@dataclasses.dataclass(frozen=True)
class ForwardFlops:
  """Forward-pass model FLOPs of one row, by where they are spent (see module docstring)."""
  encoder_dense: int
  encoder_attention: int
  decoder_dense: int
  decoder_attention: int
  logits: int

  @property
  def total(self) -> int:
    return (self.encoder_dense + self.encoder_attention + self.decoder_dense
            + self.decoder_attention + self.logits)


def forward_flops(config: network.TransformerConfig, inputs_length: int,
                  targets_length: int) -> ForwardFlops:
  """Forward FLOPs of one row of `inputs_length` source and `targets_length` target positions."""
  d, v = config.emb_dim, config.vocab_size
  a = config.num_heads * config.head_dim
  le, ld = inputs_length, targets_length
  encoder_layer_weights = 4 * d * a + 2 * d * config.mlp_dim_of('encoder')
  cross = 0 if config.decoder_only else 1  # A language model has no cross-attention.
  # Self q, k, v, out; cross q, out; MLP.
  decoder_layer_target_weights = (4 + 2 * cross) * d * a + 2 * d * config.mlp_dim_of('decoder')
  decoder_layer_source_weights = cross * 2 * d * a  # Cross k, v read the encoded source.
  return ForwardFlops(
      encoder_dense=config.num_encoder_layers * 2 * encoder_layer_weights * le,
      encoder_attention=config.num_encoder_layers * (
          4 * a * le * le + _position_flops(config, 'encoder', le)),
      decoder_dense=config.num_decoder_layers * 2 * (decoder_layer_target_weights * ld
                                                     + decoder_layer_source_weights * le),
      decoder_attention=config.num_decoder_layers * (
          4 * a * ld * (ld + cross * le) + _position_flops(config, 'decoder', ld)),
      logits=2 * d * v * ld)


def _position_flops(config: network.TransformerConfig, stack: str, length: int) -> int:
  """What `stack`'s position embedding adds to one self-attention layer over `length`
  positions (Shaw's relative tables; absolute positions add none)."""
  return config.positions_of(stack).self_attention_flops(config, length)


def train_flops_per_step(config: network.TransformerConfig, batch_size: int, inputs_length: int,
                         targets_length: int) -> int:
  """Model FLOPs of one training step over `batch_size` rows (forward and backward)."""
  return TRAIN_FORWARD_MULTIPLE * batch_size * forward_flops(config, inputs_length,
                                                             targets_length).total


def train_flops_per_target_token(config: network.TransformerConfig, inputs_length: int,
                                 targets_length: int) -> float:
  """Training model FLOPs per target position; times tokens/s gives model FLOP/s."""
  return train_flops_per_step(config, 1, inputs_length, targets_length) / targets_length

"""--dry_run: parameter counts and per-device memory from shapes alone."""

import gin
import pytest

from t5x_mt import configurables
from t5x_mt import dry_run as dry_runs
from t5x_mt import gin_utils
from t5x_mt import models
from t5x_mt import network
from t5x_mt import run_vocabulary


def parse(model_file: str, *bindings: str) -> None:
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/demo.gin', model_file], list(bindings))


def dry_run(model_file: str, *bindings: str) -> dict:
  parse(model_file, *bindings)
  return dry_runs.run_report(configurables.run_spec(), vocab_size=128000)


def test_volctrans_2b_has_2_1b_parameters():
  parse('gin/models/volctrans_2b.gin')
  parameters = models.count_params(configurables.model_config(128000))
  assert parameters == pytest.approx(2.1e9, rel=0.05)


def test_transf_deep_parameters_follow_the_architecture():
  """24+12 layers of d 1024 / FFN 4096 with one shared 128k table: 0.636B.

  The paper reports 0.59B; the layers alone are 0.504B and the table 0.131B, so no
  choice within the stated architecture reaches 0.59B (it would need a ~85k vocabulary).
  """
  d, ffn, vocab = 1024, 4096, 128000
  attention = 4 * (d * d + d)
  mlp = d * ffn + ffn + ffn * d + d
  encoder_layer = attention + mlp + 2 * 2 * d
  decoder_layer = 2 * attention + mlp + 3 * 2 * d
  expected = (24 * encoder_layer + 12 * decoder_layer + vocab * d + 2 * 512 * d + 2 * 2 * d)
  parse('gin/models/transf_deep.gin')
  parameters = models.count_params(configurables.model_config(128000))
  assert parameters == expected
  assert parameters == pytest.approx(0.636e9, rel=0.005)


def test_memory_per_device_shrinks_with_model_parallelism():
  single = dry_run('gin/models/base.gin', 'MESH_SHAPE = (1, 1)')
  sharded = dry_run('gin/models/base.gin', 'MESH_SHAPE = (2, 4)')
  assert single['vocab_size'] == 128000
  assert single['param_bytes_per_device'] == 4 * single['parameters']
  # Adam keeps two fp32 moments per parameter (plus scalar counts).
  assert single['optimizer_bytes_per_device'] == pytest.approx(
      2 * single['param_bytes_per_device'], rel=1e-4)
  # Heads, FFN units and vocabulary rows split 4 ways; embed-sized vectors do not.
  ratio = sharded['param_bytes_per_device'] / single['param_bytes_per_device']
  assert 0.25 < ratio < 0.26


def test_without_a_built_vocabulary_the_configured_size_is_used(tmp_path):
  # VOCAB_SIZE is a macro: its value, not the reference, sizes the embedding.
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/adapters/demo.gin'],
                      [f"VOCABULARY_PATH = '{tmp_path / 'missing.model'}'"])
  report = dry_runs.run_report(configurables.run_spec())
  assert report['vocab_size'] == run_vocabulary.padded_vocab_size(4000)
  # The demo's adapters: 7 targets x 6 layers, bottlenecks 4 x 256 + 2 x 128 + 64.
  base = models.count_params(network.TransformerConfig(
      vocab_size=report['vocab_size'], emb_dim=256, num_heads=4, head_dim=64, mlp_dim=1024,
      num_encoder_layers=3, num_decoder_layers=3, max_length=256))
  per_adapter = lambda b: 2 * 256 + 256 * b + b + b * 256 + 256
  adapters_total = 6 * sum(per_adapter(b) for b in (256, 256, 256, 256, 128, 128, 64))
  assert report['parameters'] == base + adapters_total

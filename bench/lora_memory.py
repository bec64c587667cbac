"""Full fine-tuning against LoRA at NLLB-200's shapes: trained parameters and optimizer state.

  python bench/lora_memory.py [--ranks=8,16,64] [--mesh_shape=1,1,1]

Builds each model from the settings of NLLB-200's Hugging Face config.json (600M distilled,
1.3B, 3.3B) as launch/import_checkpoint.py reads them, and asks the dry run
(`dry_run.memory_report`, shapes only: nothing is allocated) for its parameters, the
parameters that train, and the per-device bytes of parameters and AdamW state, with LoRA
of each rank on every attention and MLP projection and without it.
"""

import argparse
import dataclasses
import pathlib

from t5x_mt.model import network
from t5x_mt.pretrained import huggingface
from t5x_mt.training import dry_run

# The fields of NLLB-200's config.json that the model's shape depends on.
_NLLB = dict(model_type='m2m_100', activation_function='relu', vocab_size=256206,
             max_position_embeddings=1024, pad_token_id=1, decoder_start_token_id=2,
             scale_embedding=True)
NLLB_SHAPES = {
    '600M': dict(_NLLB, d_model=1024, encoder_layers=12, decoder_layers=12,
                 encoder_attention_heads=16, decoder_attention_heads=16,
                 encoder_ffn_dim=4096, decoder_ffn_dim=4096),
    '1.3B': dict(_NLLB, d_model=1024, encoder_layers=24, decoder_layers=24,
                 encoder_attention_heads=16, decoder_attention_heads=16,
                 encoder_ffn_dim=8192, decoder_ffn_dim=8192),
    '3.3B': dict(_NLLB, d_model=2048, encoder_layers=24, decoder_layers=24,
                 encoder_attention_heads=16, decoder_attention_heads=16,
                 encoder_ffn_dim=8192, decoder_ffn_dim=8192),
}

def nllb_config(shape: str) -> network.TransformerConfig:
  settings = NLLB_SHAPES[shape]
  return network.TransformerConfig(
      vocab_size=settings['vocab_size'],
      **huggingface.model_settings(settings, pathlib.Path(f'nllb-200-{shape}')))

def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--ranks', default='8,16,64')
  parser.add_argument('--mesh_shape', default='1,1,1')
  args = parser.parse_args()
  mesh_shape = [int(size) for size in args.mesh_shape.split(',')]
  gib = 2 ** 30
  print(f'{"shape":6} {"training":10} {"trained":>9} {"share":>7} {"params GiB":>11} '
        f'{"optimizer GiB":>14}')
  for shape in NLLB_SHAPES:
    config = nllb_config(shape)
    full = dry_run.memory_report(config, mesh_shape, 128, 128)
    rows = [('full', full)] + [
        (f'LoRA r={rank}', dry_run.memory_report(dataclasses.replace(config, lora_rank=rank),
                                                 mesh_shape, 128, 128))
        for rank in map(int, args.ranks.split(','))]
    for name, report in rows:
      print(f'{shape:6} {name:10} {report["trainable_parameters"] / 1e6:8.2f}M '
            f'{100 * report["trainable_parameters"] / report["parameters"]:6.2f}% '
            f'{report["param_bytes_per_device"] / gib:11.2f} '
            f'{report["optimizer_bytes_per_device"] / gib:14.3f}')
    lora_report = rows[1][1]
    print(f'lora_optimizer_bytes_{shape}: ours={lora_report["optimizer_bytes_per_device"]} '
          f'full={full["optimizer_bytes_per_device"]} ratio='
          f'{lora_report["optimizer_bytes_per_device"] / full["optimizer_bytes_per_device"]:.4f}')

if __name__ == '__main__':
  main()

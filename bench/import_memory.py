"""Peak host memory of launch/import_checkpoint.py on NLLB-200's shapes, against the weights.

  python bench/import_memory.py [--shapes=600M,1.3B,3.3B] [--work_dir=/tmp/t5x_mt/import_memory]

Nothing is downloaded: each shape's checkpoint is made here with random float32 weights
through numpy and safetensors, in shards with their index as the hub holds large models,
its config.json with NLLB-200's settings and sizes (bench/lora_memory.py), and the tiny
test checkpoint's tokenizer (tests/checkpoints/huggingface/nllb) with added tokens up to
NLLB-200's 256,206 ids, so the embedding has every row. Then the import runs as a user
runs it, in a process of its own, and the peak resident memory of that process is
compared with the checkpoint's float32 bytes. Each checkpoint and import is removed before
the next shape (the 3.3B pair takes 27 GB of disk).
"""

import argparse
import json
import pathlib
import resource
import shutil
import subprocess
import sys
import time

import numpy as np
import safetensors.numpy

from lora_memory import NLLB_SHAPES

REPO = pathlib.Path(__file__).resolve().parents[1]
TINY_NLLB = REPO / 'tests' / 'checkpoints' / 'huggingface' / 'nllb'
ATTENTION = ('q_proj', 'k_proj', 'v_proj', 'out_proj')


def _layer_shapes(prefix: str, d: int, ffn: int, cross: bool) -> dict[str, tuple]:
  shapes = {}
  for attention in ('self_attn', 'encoder_attn') if cross else ('self_attn',):
    for projection in ATTENTION:
      shapes[f'{prefix}.{attention}.{projection}.weight'] = (d, d)
      shapes[f'{prefix}.{attention}.{projection}.bias'] = (d,)
    for part in ('weight', 'bias'):
      shapes[f'{prefix}.{attention}_layer_norm.{part}'] = (d,)
  shapes.update({f'{prefix}.fc1.weight': (ffn, d), f'{prefix}.fc1.bias': (ffn,),
                 f'{prefix}.fc2.weight': (d, ffn), f'{prefix}.fc2.bias': (d,),
                 f'{prefix}.final_layer_norm.weight': (d,),
                 f'{prefix}.final_layer_norm.bias': (d,)})
  return shapes


def _shards(settings: dict) -> list[dict[str, tuple]]:
  """The tensors' names and shapes, a shard per layer (the embedding and norms apart)."""
  d, ffn = settings['d_model'], settings['encoder_ffn_dim']
  shards = [{'model.shared.weight': (settings['vocab_size'], d),
             **{f'model.{stack}.layer_norm.{part}': (d,)
                for stack in ('encoder', 'decoder') for part in ('weight', 'bias')}}]
  for stack in ('encoder', 'decoder'):
    for index in range(settings[f'{stack}_layers']):
      shards.append(_layer_shapes(f'model.{stack}.layers.{index}', d, ffn,
                                  cross=stack == 'decoder'))
  return shards


def make_checkpoint(shape: str, folder: pathlib.Path) -> int:
  """Writes an NLLB-200-shaped checkpoint of random weights; returns its float32 bytes."""
  settings = dict(NLLB_SHAPES[shape], model_type='m2m_100', encoder_layerdrop=0.0,
                  decoder_layerdrop=0.0, eos_token_id=2, bos_token_id=0,
                  tie_word_embeddings=True)
  folder.mkdir(parents=True)
  (folder / 'config.json').write_text(json.dumps(settings))
  shutil.copy(TINY_NLLB / 'sentencepiece.bpe.model', folder)
  tokenizer = json.loads((TINY_NLLB / 'tokenizer.json').read_text(encoding='utf-8'))
  first_free = 1 + max(token['id'] for token in tokenizer['added_tokens'])
  tokenizer['added_tokens'] += [
      {'id': token_id, 'content': f'<extra_{token_id}>', 'single_word': False,
       'lstrip': False, 'rstrip': False, 'normalized': False, 'special': True}
      for token_id in range(first_free, settings['vocab_size'])]
  (folder / 'tokenizer.json').write_text(json.dumps(tokenizer), encoding='utf-8')
  shutil.copy(TINY_NLLB / 'tokenizer_config.json', folder)
  rng = np.random.default_rng(0)
  weight_map, total = {}, 0
  for number, shard in enumerate(_shards(settings)):
    name = f'model-{number:05d}.safetensors'
    tensors = {key: rng.standard_normal(size, np.float32) * 0.02
               for key, size in shard.items()}
    safetensors.numpy.save_file(tensors, folder / name)
    total += sum(tensor.nbytes for tensor in tensors.values())
    weight_map.update({key: name for key in shard})
  (folder / 'model.safetensors.index.json').write_text(json.dumps(
      {'metadata': {'total_size': total}, 'weight_map': weight_map}))
  return total


def import_peak(checkpoint: pathlib.Path, output: pathlib.Path) -> tuple[int, float]:
  """(peak resident bytes, seconds) of launch/import_checkpoint.py in a process of its own."""
  start = time.time()
  before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  subprocess.run([sys.executable, str(REPO / 'launch' / 'import_checkpoint.py'),
                  '--format=huggingface', f'--path={checkpoint}', f'--output_dir={output}'],
                 check=True, cwd=REPO)
  peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
  if peak <= before:
    raise RuntimeError('the import peaked below an earlier child process; run one shape')
  return peak * 1024, time.time() - start


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--shapes', default='600M,1.3B,3.3B')
  parser.add_argument('--work_dir', default='/tmp/t5x_mt/import_memory')
  args = parser.parse_args()
  work = pathlib.Path(args.work_dir)
  rows = []
  for shape in args.shapes.split(','):
    shutil.rmtree(work, ignore_errors=True)
    weights = make_checkpoint(shape, work / 'checkpoint')
    peak, seconds = import_peak(work / 'checkpoint', work / 'imported')
    rows.append((shape, weights, peak, seconds))
    print(f'import_peak_rss_{shape}: ours={peak / 2**30:.2f} GiB '
          f'weights={weights / 2**30:.2f} GiB ratio={peak / weights:.2f} ({seconds:.0f} s)',
          flush=True)
  shutil.rmtree(work, ignore_errors=True)
  print(f'{"shape":6} {"weights GiB":>12} {"peak RSS GiB":>13} {"ratio":>6}')
  for shape, weights, peak, _ in rows:
    print(f'{shape:6} {weights / 2**30:12.2f} {peak / 2**30:13.2f} {peak / weights:6.2f}')


if __name__ == '__main__':
  main()

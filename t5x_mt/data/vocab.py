"""Shared SentencePiece unigram vocabulary for many languages.

Languages differ in size by orders of magnitude; training the tokenizer on raw text would
leave the small ones with character-level pieces. Following METHODS.md section 3, each
language's sentences are sampled with probability proportional to n_l^alpha (alpha = 0.3),
so small languages are upsampled and large ones downsampled before SentencePiece sees them.
"""

from collections.abc import Mapping, Sequence
import logging
import os
import pathlib
import tempfile

import numpy as np
import sentencepiece as spm

from t5x_mt.data import tags
from t5x_mt.errors import UserError

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2


def language_sampling_probabilities(sizes: Mapping[str, int], alpha: float) -> dict[str, float]:
  """p_l = n_l^alpha / sum_k n_k^alpha over languages with at least one sentence."""
  kept = {lang: n for lang, n in sizes.items() if n > 0}
  if not kept:
    raise UserError('vocabulary: the training side of the mixture has no sentences')
  weights = {lang: float(n) ** alpha for lang, n in kept.items()}
  total = sum(weights.values())
  return {lang: w / total for lang, w in sorted(weights.items())}


def sample_training_text(sentences: Mapping[str, Sequence[str]], *, alpha: float,
                         num_sentences: int, seed: int) -> list[str]:
  """Draws `num_sentences` lines, language l with probability p_l, uniformly within l.

  Lines are drawn with replacement, so a small language can contribute more lines than
  it has; the expected count for l is num_sentences * p_l.
  """
  probabilities = language_sampling_probabilities(
      {lang: len(lines) for lang, lines in sentences.items()}, alpha)
  rng = np.random.default_rng(seed)
  langs = list(probabilities)
  counts = rng.multinomial(num_sentences, [probabilities[lang] for lang in langs])
  sample = []
  for lang, count in zip(langs, counts):
    lines = sentences[lang]
    sample.extend(lines[i] for i in rng.integers(0, len(lines), size=count))
  rng.shuffle(sample)
  return sample


def train_sentencepiece(sentences: Mapping[str, Sequence[str]], output_path: str, *,
                        vocab_size: int, alpha: float = 0.3, num_sentences: int = 1_000_000,
                        character_coverage: float = 0.9995, seed: int = 0) -> str:
  """Trains a unigram model on language-balanced text and writes `output_path`.

  The model reserves pad=0, eos=1, unk=2 (seqio's convention, no BOS), holds every
  language tag, `<BT>`, `<DA>` and `TBD0..TBD31` as single pieces, and falls back to
  bytes for characters it has not seen. `vocab_size` is an upper bound: for small corpora
  SentencePiece stops at the number of pieces the text supports. The file appears only
  when complete.
  """
  total_lines = sum(len(lines) for lines in sentences.values())
  sample = sample_training_text(sentences, alpha=alpha,
                                num_sentences=min(num_sentences, max(total_lines, 1) * 4),
                                seed=seed)
  output = pathlib.Path(output_path)
  output.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=output.parent) as workdir:
    text_file = os.path.join(workdir, 'text.txt')
    with open(text_file, 'w', encoding='utf-8') as f:
      for line in sample:
        f.write(line.replace('\n', ' ') + '\n')
    prefix = os.path.join(workdir, 'spm')
    spm.set_random_generator_seed(seed)
    spm.SentencePieceTrainer.train(
        input=text_file, model_prefix=prefix, model_type='unigram', vocab_size=vocab_size,
        hard_vocab_limit=False, character_coverage=character_coverage, byte_fallback=True,
        pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        user_defined_symbols=tags.special_symbols(), input_sentence_size=len(sample),
        shuffle_input_sentence=False, num_threads=os.cpu_count() or 1,
        minloglevel=2)
    os.replace(prefix + '.model', output)
  logging.info('Wrote %s from %d sampled lines of %d languages', output, len(sample),
               len(sentences))
  return str(output)

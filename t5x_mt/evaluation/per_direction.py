"""The per-direction evaluation of a model, which the training loop runs at its
evaluation steps and launch/evaluate.py runs on demand: each direction of a mixture
translated on a split and scored (sacreBLEU, `scoring`), into the eval file's summary."""

from collections.abc import Iterator, Sequence
import dataclasses
from typing import Any

from t5x_mt.core import files
from t5x_mt.core import progress
from t5x_mt.core import validation
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.data import corpora
from t5x_mt.data import mixtures
from t5x_mt.decoding import family_routing
from t5x_mt.decoding import inference
from t5x_mt.evaluation import scoring

# The gin name of EvalConfig (configurables.py registers it).
EVAL_CONFIGURABLE = 'evaluation.EvalConfig'
# What a model's scores may be compared with: its sources copied as their translations.
BASELINES = ('copy',)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """How the run's directions are evaluated during and after training.

  By default each direction is evaluated on the `split` of the first of its training
  corpora that has one (back-translations have none); `corpus` evaluates the same
  directions on another registered corpus (e.g. train on NTREX-128, validate on
  FLORES-200 dev). `spm_model_path` adds spBLEU with that SentencePiece model.
  `baseline='copy'` also scores each direction's sources copied unchanged as their
  translations, the score a model must beat to be of any use.
  """
  split: str = 'validation'
  corpus: str | None = None
  max_sentences: int | None = 200
  spm_model_path: str | None = None
  baseline: str | None = None

  def __post_init__(self):
    if self.spm_model_path is not None:
      object.__setattr__(self, 'spm_model_path', files.expand(self.spm_model_path))
    if self.max_sentences is not None:
      validation.integer(f'{EVAL_CONFIGURABLE}.max_sentences', self.max_sentences,
                         minimum=1)
    if self.baseline is not None:
      validation.choice(f'{EVAL_CONFIGURABLE}.baseline', self.baseline, BASELINES)



def evaluate_directions(translator: inference.Translator | family_routing.FamilyTranslator,
                        mixture: mixtures.MixtureView, step: int | None,
                        config: EvalConfig, split: str | None = None, *,
                        progress_bar: bool = False) -> dict[str, Any]:
  """Translates each direction's split (`config.split` unless given) and scores it (the
  eval/step_<N>.json summary, with its split and task), with the share of its outputs
  caught in a loop (`scoring.looping_share`) and, if the config asks, the copy
  baseline. A direction several corpora train is evaluated once. The progress bar counts
  the sentences of every direction, once per leg of a pivoted one."""
  split = split or config.split
  directions = list(evaluation_pairs(mixture, config, split))
  total = sum(len(pairs) * len(translator.legs(direction.src_lang, direction.tgt_lang))
              for direction, pairs in directions)
  scores = {}
  with progress.bar(total=total, desc=f'{mixture.name} {split}', unit='sentence',
                    shown=progress_bar) as bar:
    for direction, pairs in directions:
      sources, references = zip(*pairs)
      hypotheses = translator.translate(list(sources), direction.src_lang, direction.tgt_lang,
                                        on_batch=bar.update)
      scores[direction.name] = scoring.score_translations(
          list(sources), hypotheses, list(references), spm_model_path=config.spm_model_path,
          baseline=config.baseline)
  summary = scoring.summarize(step, scores)
  summary.update(split=split, task=mixture.name)
  return summary


def evaluation_pairs(mixture: mixtures.MixtureView, config: EvalConfig, split: str
                     ) -> Iterator[tuple[Direction, list[tuple[str, str]]]]:
  """Each direction the run scores, once, with the pairs of `split` it is scored on."""
  seen = set()
  for member in mixture.members:
    direction = member.direction
    source = corpora.get_corpus(config.corpus or member.corpus)
    if direction in seen or (config.corpus is None and split not in source.splits()):
      continue
    pairs = source.pairs(split, direction.src_lang, direction.tgt_lang)[:config.max_sentences]
    if pairs:
      seen.add(direction)
      yield direction, pairs


def check_evaluable(mixture: mixtures.MixtureView, config: EvalConfig,
                    splits: Sequence[str]) -> None:
  """A UserError before training where a split the run scores would score no direction
  (a streamed corpus, for one, has only a train split)."""
  for split in splits:
    if next(evaluation_pairs(mixture, config, split), None) is None:
      raise UserError(f'no direction of {mixture.name!r} has {split} pairs in its '
                      'corpora; name a corpus that has them with '
                      'evaluation.EvalConfig.corpus')

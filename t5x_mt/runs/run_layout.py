"""Where a training run keeps its files: the one owner of MODEL_DIR's names.

A run folder holds what its readers need (translation, evaluation, fine-tuning,
averaging, plots) and what a resumed run picks up again:

  config.gin        the operative gin config
  vocab.model       a copy of the run's SentencePiece model
  source_vocab.model  the model that segments sources, where the run has one of its own
                    (imported Marian models; `DataSettings.source_vocabulary_path`)
  directions.json   the directions it trained on (with those of the run it started from)
  metrics.jsonl     one record per logged step; tensorboard/ the same as event files
  best.json         early stopping's best step, evaluations since, every evaluation
  dro_groups.json   DRO's groups, data shares and baselines
  base_run.json     a LoRA run started from another: that run and the checkpoint step whose
                    parameters this run's checkpoints leave out (`RunCheckpoints`)
  checkpoints/      Orbax checkpoints, one folder per step
  input_state/      the input shards' positions and DRO's state per checkpoint step
  damaged/          checkpoints that could not be read, set aside when the run resumed
  eval/             validation scores, step_<N>.json; <split>/eval/ for other splits
  <corpus files>    what the run's corpora keep with every run trained on them
                    (`corpus_file`): marking_lexicon.json, a Yoruba diacritics run's
                    word markings

Every module that reads or writes one of these asks a `RunLayout` for its path. A run
folder on an object store (gs://bucket/run) keeps its scheme in every path (`files.path`).
"""

from collections.abc import Iterable
import dataclasses
import json
import logging
import os

from t5x_mt.core import files
from t5x_mt.core import directions
from t5x_mt.core.errors import UserError

_VALIDATION = 'validation'
# What every CTranslate2 model folder holds (`ctranslate2.contains_model`).
CTRANSLATE2_MODEL = 'model.bin'


@dataclasses.dataclass(frozen=True)
class RunLayout:
  """The paths of the files in run folder `root` (nothing is read or created)."""
  root: files.AnyPath

  def __init__(self, root: str | os.PathLike):
    object.__setattr__(self, 'root', files.path(root))

  @property
  def config(self) -> files.AnyPath:
    return self.root / 'config.gin'

  @property
  def vocabulary(self) -> files.AnyPath:
    return self.root / 'vocab.model'

  @property
  def source_vocabulary(self) -> files.AnyPath:
    return self.root / 'source_vocab.model'

  @property
  def directions(self) -> files.AnyPath:
    return self.root / 'directions.json'

  @property
  def base_run(self) -> files.AnyPath:
    return self.root / 'base_run.json'

  @property
  def metrics(self) -> files.AnyPath:
    return self.root / 'metrics.jsonl'

  @property
  def tensorboard(self) -> files.AnyPath:
    return self.root / 'tensorboard'

  @property
  def best(self) -> files.AnyPath:
    return self.root / 'best.json'

  @property
  def dro_groups(self) -> files.AnyPath:
    return self.root / 'dro_groups.json'

  def check_is_run(self, flag: str) -> None:
    """A UserError naming `flag` unless the folder holds what every reader of a run needs:
    config.gin, vocab.model and checkpoints/."""
    self.check_not_an_export(flag)
    for path in (self.config, self.vocabulary, self.checkpoints):
      if not path.exists():
        raise UserError(f'{flag}: {self.root} is not a run folder (it has no {path.name})')

  def check_not_an_export(self, flag: str) -> None:
    """A UserError naming `flag` where the folder is a CTranslate2 export
    (launch/export.py): it holds a run's config.gin beside CTranslate2's model, and no
    checkpoints, so only the commands that translate read it, as --ctranslate2."""
    if (self.root / CTRANSLATE2_MODEL).is_file() and not self.checkpoints.exists():
      raise UserError(f'{flag}: {self.root} is a CTranslate2 export, not a training run: '
                      f'translate.py, evaluate.py and serve.py take it as '
                      f'--ctranslate2={self.root}; other commands read the run it was '
                      'exported from')

  def check_one_vocabulary(self, flag: str) -> None:
    """A UserError naming `flag` where the run segments its sources with a vocabulary of
    their own (an OPUS-MT import): a grown vocabulary would leave that one behind."""
    if self.source_vocabulary.is_file():
      raise UserError(f'{flag}: {self.root} segments its sources with a vocabulary of their '
                      f'own ({self.source_vocabulary.name}, an OPUS-MT import); languages '
                      'are added to runs of one vocabulary')

  def corpus_file(self, name: str) -> files.AnyPath:
    """A file a corpus of the run keeps with it (`mixtures.run_files`)."""
    return self.root / name

  @property
  def checkpoints(self) -> files.AnyPath:
    return self.root / 'checkpoints'

  @property
  def input_state(self) -> files.AnyPath:
    return self.root / 'input_state'

  @property
  def damaged(self) -> files.AnyPath:
    return self.root / 'damaged'

  def host_state_prefix(self, step: int) -> str:
    """The path prefix of the host-side state (input positions, DRO) saved with
    checkpoint `step`."""
    return str(self.input_state / f'step_{step}' / 'state')

  def eval_dir(self, split: str = _VALIDATION) -> files.AnyPath:
    """Where scores on `split` go: eval/ for validation, <split>/eval/ for any other."""
    return (self.root if split == _VALIDATION else self.root / split) / 'eval'

  def eval_record(self, step: int, split: str = _VALIDATION) -> files.AnyPath:
    """The scores of checkpoint `step` on `split`."""
    return self.eval_dir(split) / f'step_{step}.json'

  def trained_directions(self) -> list[str] | None:
    """The directions the run (or the run it was fine-tuned from) trained on, None for a
    run that did not record them."""
    if not self.directions.is_file():
      return None
    return json.loads(self.directions.read_text(encoding='utf-8'))['directions']

  def warn_untrained(self, legs: Iterable[tuple[str, str]]) -> None:
    """Logs a warning for each leg (src, tgt) of a translation that the run did not train
    on (`directions.untrained_warnings`); none for a run that did not record its
    directions."""
    trained = self.trained_directions()
    if trained is not None:
      for warning in directions.untrained_warnings(
          [directions.Direction(*leg) for leg in legs], trained):
        logging.warning(warning)

  def write_directions(self, names: Iterable[str]) -> None:
    """Records the directions the run trains on, sorted and without repeats."""
    files.write_text_atomically(self.directions, json.dumps(
        {'directions': sorted(set(names))}, indent=2) + '\n')

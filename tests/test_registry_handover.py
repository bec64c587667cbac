"""The task registry's handover: the launch layer sets data_tasks up (data_tasks.from_gin)
and hands the library names it has registered; the library looks them up through seqio
and checks that the registry encodes with the run's own vocabulary."""

import pytest
import seqio

from conftest import configure_tiny_run
import data_tasks
from data_tasks import from_gin
from t5x_mt.model import network
from t5x_mt.training import run_config
from t5x_mt.training import train_loop
from t5x_mt.data import mixtures
from t5x_mt.core.directions import Direction
from t5x_mt.data.settings import DataSettings
from t5x_mt.core.errors import UserError

ENG, HAU = 'eng_Latn', 'hau_Latn'


def test_the_library_names_the_registered_mixtures_for_a_name_never_registered():
  with pytest.raises(UserError, match="^MIXTURE_OR_TASK_NAME: unknown mixture or task "
                     "'test_handover_nowhere'; registered mixtures: .*cldr_demo"):
    mixtures.mixture_view('test_handover_nowhere')


def test_a_run_refuses_tasks_the_registry_encodes_with_another_vocabulary(tiny_mixture,
                                                                         tmp_path):
  vocabulary = str(tmp_path / 'vocab.model')
  spec = run_config.RunSpec(
      train=run_config.TrainConfig(model_dir=str(tmp_path / 'run'), train_steps=1,
                                   batch_size=8, mixture_or_task_name=tiny_mixture),
      model=network.TransformerConfig(vocab_size=1, emb_dim=32, num_heads=2, head_dim=16,
                                      mlp_dim=64, num_encoder_layers=1, num_decoder_layers=1),
      data=DataSettings(vocabulary_path=vocabulary))
  task = data_tasks.task_name(tiny_mixture, ENG, 'fra_Latn')
  with pytest.raises(UserError, match=f"^{task}: its inputs are encoded with "
                     f"{data_tasks.settings().vocabulary_path}, not with the run's "
                     f'vocabulary {vocabulary};'):
    train_loop.build_run(spec)
  assert not (tmp_path / 'run').exists() and not (tmp_path / 'vocab.model').exists()
  data_tasks.configure(spec.data)  # What the launch layer does before it hands over.
  mixtures.check_vocabulary(tiny_mixture, vocabulary)


def test_the_launch_layer_registers_the_runs_task_before_handing_it_over(tmp_path):
  (tmp_path / 'train.eng').write_text('one\ntwo\nthree\n', encoding='utf-8')
  (tmp_path / 'train.hau').write_text('daya\nbiyu\nuku\n', encoding='utf-8')
  corpus = 'test_handover_files'
  task = data_tasks.task_name(corpus, HAU, ENG)
  configure_tiny_run(tmp_path / 'run', tmp_path / 'vocab.model', task, 2, **{
      'data_tasks.register_from_config.corpora_files': repr({corpus: {
          'languages': [ENG, HAU],
          'train': [str(tmp_path / 'train.eng'), str(tmp_path / 'train.hau')]}}),
      'data_tasks.tag_strategy.strategy': "'t_enc'"})
  assert task not in seqio.TaskRegistry.names()
  spec = from_gin.run_spec()
  assert data_tasks.settings() == spec.data
  assert spec.data.tag_strategy == 't_enc'
  assert spec.data.vocabulary_path == str(tmp_path / 'vocab.model')
  # Registered on demand by the launch layer, read by the library through seqio alone.
  assert mixtures.mixture_view(task).members == (mixtures.MixtureMember(
      task, corpus, Direction(HAU, ENG), rate=1.0, pairs=3),)
  mixtures.check_vocabulary(task, spec.data.vocabulary_path)

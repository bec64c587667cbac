"""Outputs appear whole or not at all."""

import os
import stat

import pytest
import tensorflow as tf

from t5x_mt.core import files
from t5x_mt.core.errors import UserError

import fake_object_store
from fake_object_store import gcs_bucket  # pylint: disable=unused-import


class Interrupted(Exception):
  pass


def test_interrupted_write_keeps_the_previous_file_and_no_temporary(tmp_path, monkeypatch):
  target = tmp_path / 'out' / 'metrics.jsonl'
  files.write_text_atomically(target, 'old\n')

  def fail_on_rename(src, dst):
    raise Interrupted()

  monkeypatch.setattr(os, 'replace', fail_on_rename)
  with pytest.raises(Interrupted):
    files.write_text_atomically(target, 'new\n')
  assert target.read_text() == 'old\n'
  assert sorted(p.name for p in target.parent.iterdir()) == ['metrics.jsonl']


def test_written_file_is_readable_by_others_as_umask_allows(tmp_path):
  previous = os.umask(0o022)
  try:
    path = files.write_bytes_atomically(tmp_path / 'vocab.model', b'\x00\x01')
  finally:
    os.umask(previous)
  assert path.read_bytes() == b'\x00\x01'
  assert stat.S_IMODE(path.stat().st_mode) == 0o644


def _contents(folder) -> dict[str, str]:
  return {p.name: p.read_text() for p in folder.iterdir()}


def test_a_failed_staged_folder_leaves_the_previous_folder_and_no_staging(tmp_path):
  output = tmp_path / 'corpus'
  output.mkdir()
  (output / 'old.txt').write_text('old')
  with pytest.raises(Interrupted):
    with files.staged_folder(output) as staging:
      (staging / 'new.txt').write_text('new')
      raise Interrupted()
  assert _contents(output) == {'old.txt': 'old'}
  assert [p.name for p in tmp_path.iterdir()] == ['corpus']


def test_a_failed_staged_folder_for_a_new_output_leaves_nothing(tmp_path):
  with pytest.raises(Interrupted):
    with files.staged_folder(tmp_path / 'out' / 'corpus') as staging:
      (staging / 'new.txt').write_text('new')
      raise Interrupted()
  assert list((tmp_path / 'out').iterdir()) == []


def test_a_finished_staged_folder_replaces_the_previous_one_whole(tmp_path, monkeypatch):
  output = tmp_path / 'corpus'
  output.mkdir()
  (output / 'old.txt').write_text('old')
  (tmp_path / '.corpus.partial').mkdir()  # Left by a killed earlier attempt.
  (tmp_path / '.corpus.partial' / 'stale.txt').write_text('stale')
  seen_at_output = []
  replace = os.replace

  def replace_and_look(src, dst):
    replace(src, dst)
    seen_at_output.append(_contents(output) if output.exists() else None)

  monkeypatch.setattr(os, 'replace', replace_and_look)
  with files.staged_folder(output) as staging:
    assert staging.parent == tmp_path and list(staging.iterdir()) == []
    (staging / 'new.txt').write_text('new')
  assert _contents(output) == {'new.txt': 'new'}
  assert [p.name for p in tmp_path.iterdir()] == ['corpus']
  # Each rename leaves the old folder, the new one or (between the two) none at the output.
  assert seen_at_output and all(seen in (None, {'old.txt': 'old'}, {'new.txt': 'new'})
                                for seen in seen_at_output)


def test_a_write_to_gs_lands_in_the_object_store_and_nothing_local(gcs_bucket, tmp_path,
                                                                   monkeypatch):
  monkeypatch.chdir(tmp_path)
  target = f'{gcs_bucket}/run/eval/step_3.json'
  assert str(files.write_text_atomically(target, 'old\n')) == target
  files.write_text_atomically(target, 'new\n')
  assert tf.io.gfile.GFile(fake_object_store.in_ram(target)).read() == 'new\n'
  assert list(tmp_path.iterdir()) == []  # pathlib would have made ./gs:/bucket/run.


def test_appends_to_a_log_on_gs_keep_the_earlier_records(gcs_bucket):
  log = f'{gcs_bucket}/run/metrics.jsonl'
  files.append_text(log, '{"step": 1}\n')
  files.append_text(log, '{"step": 2}\n')
  assert files.read_json_lines(log) == [{'step': 1}, {'step': 2}]


def test_an_output_on_gs_is_checked_for_its_kind_and_nothing_is_written(gcs_bucket):
  tf.io.gfile.makedirs(f'{gcs_bucket}/run')
  with tf.io.gfile.GFile(f'{gcs_bucket}/run/metrics.jsonl', 'w') as log:
    log.write('{"step": 1}\n')
  before = list(tf.io.gfile.walk(gcs_bucket))
  files.check_output(f'{gcs_bucket}/run', 'MODEL_DIR', folder=True)
  files.check_output(f'{gcs_bucket}/new/run', 'MODEL_DIR', folder=True)
  files.check_output(f'{gcs_bucket}/run/best.json', '--output')
  assert list(tf.io.gfile.walk(gcs_bucket)) == before
  with pytest.raises(UserError, match=f'^MODEL_DIR: {gcs_bucket}/run/metrics.jsonl is a '
                     'file, not a folder$'):
    files.check_output(f'{gcs_bucket}/run/metrics.jsonl', 'MODEL_DIR', folder=True)
  with pytest.raises(UserError, match=f'^--output: {gcs_bucket}/run is a folder, not a file$'):
    files.check_output(f'{gcs_bucket}/run', '--output')


def test_a_store_that_refuses_the_look_up_is_one_line_naming_the_flag(gcs_bucket,
                                                                      monkeypatch):
  def refuse(path):
    raise tf.errors.PermissionDeniedError(None, None, 'caller has no storage.objects.get '
                                          'access\nsee the bucket IAM policy')

  monkeypatch.setattr(tf.io.gfile, 'exists', refuse)
  with pytest.raises(UserError) as error:
    files.check_output(f'{gcs_bucket}/run', 'MODEL_DIR', folder=True)
  assert str(error.value) == (f'MODEL_DIR: cannot reach {gcs_bucket}/run: caller has no '
                              'storage.objects.get access')


def test_a_staged_folder_on_gs_is_built_in_place_and_removed_on_failure(gcs_bucket):
  with pytest.raises(Interrupted):
    with files.staged_folder(f'{gcs_bucket}/failed') as staging:
      files.write_text_atomically(staging / 'config.gin', 'x')
      raise Interrupted()
  with files.staged_folder(f'{gcs_bucket}/averaged') as staging:
    assert str(staging) == f'{gcs_bucket}/averaged'
    files.write_text_atomically(staging / 'config.gin', 'x')
  assert tf.io.gfile.listdir(gcs_bucket) == ['averaged']
  assert tf.io.gfile.listdir(f'{gcs_bucket}/averaged') == ['config.gin']


def test_a_location_with_a_scheme_other_than_gs_is_refused_in_one_line():
  with pytest.raises(UserError, match=r'^s3://bucket/run: unsupported scheme'):
    files.path('s3://bucket/run')

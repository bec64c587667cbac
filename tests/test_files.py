"""Outputs appear whole or not at all."""

import os
import stat

import pytest

from t5x_mt import files


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

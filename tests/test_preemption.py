"""Preemption: SIGTERM or SIGINT saves the step it arrives at and exits 0 within seconds,
without evaluating; the same command resumes from that step."""

import json
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from conftest import tiny_run_flags
from test_launch_translate_evaluate import run_in_process

from t5x_mt.core import interrupts
from t5x_mt.training import actions

REPO = pathlib.Path(__file__).resolve().parents[1]


def _flags(model_dir: pathlib.Path, vocabulary: pathlib.Path, steps: int) -> list[str]:
  """launch/train.py's flags for the tiny eng->hau run."""
  return tiny_run_flags(model_dir, vocabulary, 'cldr_eng_Latn.hau_Latn', steps,
                        CHECKPOINT_EVERY_STEPS='1000')


def _train(model_dir: pathlib.Path, vocabulary: pathlib.Path, steps: int) -> subprocess.Popen:
  """launch/train.py on the tiny eng->hau run, as a user starts it."""
  return subprocess.Popen([sys.executable, 'launch/train.py', *_flags(model_dir, vocabulary,
                                                                       steps)],
                          cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _logged_steps(model_dir: pathlib.Path) -> list[int]:
  metrics = model_dir / 'metrics.jsonl'
  if not metrics.exists():
    return []
  return [json.loads(line)['step'] for line in metrics.read_text().splitlines()
          if line.endswith('}')]


@pytest.mark.slow
def test_sigterm_saves_the_step_and_exits_0_and_the_same_command_resumes(trained_run, tmp_path,
                                                                         monkeypatch, capsys):
  signal_number = signal.SIGTERM
  vocabulary = trained_run.parent / 'vocab' / 'eng_hau.model'
  model_dir = tmp_path / 'run'
  process = _train(model_dir, vocabulary, 1000)
  deadline = time.monotonic() + 240
  while len(_logged_steps(model_dir)) < 3 and time.monotonic() < deadline:
    assert process.poll() is None, process.communicate()[1][-2000:]
    time.sleep(0.2)
  process.send_signal(signal_number)
  signalled = time.monotonic()
  _, stderr = process.communicate(timeout=120)
  seconds = time.monotonic() - signalled
  assert process.returncode == 0, stderr[-2000:]
  assert seconds < 30
  step = _logged_steps(model_dir)[-1]
  assert step >= 3
  name = signal.Signals(signal_number).name
  assert f'{name} at step {step}: saved checkpoint {step} and stopped' in stderr
  assert sorted(p.name for p in (model_dir / 'checkpoints').iterdir()) == [str(step)]
  assert not (model_dir / 'eval').exists()  # No evaluation on the way out.
  # The same command (with its end brought closer) resumes from that step; run through
  # cli.run in this process, which reads the same flags the same way, to spare a second
  # process its imports.
  code, _, stderr = run_in_process('train.py', _flags(model_dir, vocabulary, step + 2),
                                   monkeypatch, capsys)
  assert code == 0, stderr[-2000:]
  assert _logged_steps(model_dir) == list(range(1, step + 3))


def test_while_listening_sigint_is_noted_instead_of_interrupting_and_is_given_back():
  preemption = actions.SaveOnPreemption()
  before = signal.getsignal(signal.SIGINT)
  with preemption.listening():
    signal.raise_signal(signal.SIGINT)  # Ctrl-C: no KeyboardInterrupt inside the loop.
    assert preemption._reached(1)  # pylint: disable=protected-access
  assert signal.getsignal(signal.SIGINT) is before


def test_a_ctrl_c_held_back_by_a_checkpoint_write_reaches_the_loops_handler():
  """A checkpoint's wait holds Ctrl-C back (`interrupts.deferred`), then hands it to the
  handler in place: inside the loop, preemption's, which saves and stops; no
  KeyboardInterrupt."""
  preemption = actions.SaveOnPreemption()
  with preemption.listening():
    with interrupts.deferred():
      signal.raise_signal(signal.SIGINT)
      assert not preemption._reached(1)  # pylint: disable=protected-access
    assert preemption._reached(1)  # pylint: disable=protected-access

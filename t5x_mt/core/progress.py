"""Progress bars on what a person waits for: training, translation, evaluation.

Every bar is tqdm's on stderr, away from the results a command prints on stdout. Process 0
alone shows it (the others do the same work), and only on a terminal: in a log file or a
pipe its redraws would be noise, so a line in the log reports progress there instead
(`report`).
"""

import logging
import sys

import tqdm

from t5x_mt.core import cli
from t5x_mt.core import processes


def bar(*, total: int | None, desc: str, unit: str, shown: bool = True,
        initial: int = 0) -> tqdm.tqdm:
  """A bar of `total` units (None: a count without an end), shown if `shown`, process 0
  runs it, and stderr is a terminal.

  A bar on its own stays on screen at its end; one below another (an evaluation below
  the training bar) clears its line when it closes.
  """
  return tqdm.tqdm(total=total, initial=initial, desc=desc, unit=unit, file=sys.stderr,
                   disable=None if shown and processes.is_primary() else True,
                   leave=None, dynamic_ncols=True)


def report(shown_by: tqdm.tqdm, message: str) -> None:
  """Logs `message` (the state of a long job) where the bar `shown_by` is not drawn but
  process 0 runs: a log file or a pipe gets it as a line of the progress log, which
  commands show by default (`cli.set_verbosity`); a terminal has the bar."""
  if shown_by.disable and processes.is_primary():
    logging.getLogger(cli.PROGRESS_LOG).info(message)

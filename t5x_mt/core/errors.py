"""The errors a command reports in one line instead of a traceback.

`UserError` means "the user's input is wrong", not "the code is wrong": launch scripts
print its message (which names the file, line or flag at fault) as one line on stderr and
exit with status 2. `RunFailure` means a run could not go on although its input was
valid (its training diverged): one line, status 1.
"""


class UserError(ValueError):
  """Bad input from a user: a file, a line in it, a flag or a gin binding."""


class RunFailure(RuntimeError):
  """A run that stopped because it cannot go on, with what the user can do about it."""

"""The one error type that means "the user's input is wrong", not "the code is wrong".

Launch scripts catch it, print its message (which names the file, line or flag at fault)
as one line on stderr, and exit with status 2.
"""


class UserError(ValueError):
  """Bad input from a user: a file, a line in it, a flag or a gin binding."""

"""The registry's run-level settings: one `DataSettings` value for the whole process.

Tasks are registered once, at import or on first use, and read the settings when a dataset
is built, so that one registry serves every run: the settings are chosen after the tasks
exist (`configure`), and every module of the registry reads the current value through
`settings()` rather than keeping a copy of its own.
"""

from t5x_mt.data.settings import DataSettings

_SETTINGS = DataSettings()


def configure(data_settings: DataSettings) -> None:
  """Makes `data_settings` the registry's settings for the rest of the process."""
  global _SETTINGS
  _SETTINGS = data_settings


def settings() -> DataSettings:
  """The registry's settings: those last given to `configure`, else the defaults."""
  return _SETTINGS

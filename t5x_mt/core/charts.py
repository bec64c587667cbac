"""Charts rendered off-screen to PNG bytes, which callers write atomically.

matplotlib is imported only when a chart is drawn: the commands that never plot do not
pay for it.
"""

import io


def pyplot():
  """matplotlib's pyplot on the Agg backend, which needs no display."""
  import matplotlib  # pylint: disable=g-import-not-at-top  (plotting only here)
  matplotlib.use('Agg')
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt


def legend_outside(axes, **legend_options) -> None:
  """The legend of `axes` to the right of its plotting area, where it covers no data:
  among many bars matplotlib's 'best' place may have no free corner, and then a legend
  hides bars. `png_bytes` makes room for it."""
  axes.legend(loc='upper left', bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              **legend_options)


def png_bytes(figure) -> bytes:
  """`figure` laid out, rendered as a 100-dpi PNG, and closed."""
  figure.tight_layout()
  buffer = io.BytesIO()
  figure.savefig(buffer, format='png', dpi=100)
  pyplot().close(figure)
  return buffer.getvalue()

"""What every layer shares and nothing machine-learned: user errors, files written
atomically, FLORES-200 languages and translation directions, processes and device meshes,
progress bars, charts, Ctrl-C held back while a write finishes (`interrupts`), and the
commands' one-line errors and interruptions (`cli`).

May import nothing else from t5x_mt.
"""

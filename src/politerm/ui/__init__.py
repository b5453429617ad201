"""Watching and steering runs live: the terminal dashboard, the web monitor, notifications.

Both views read the same :func:`politerm.ui.overview.collect_overview` data, kept fresh by
:class:`politerm.ui.live.LiveState` from store events and the driver's
:class:`~politerm.driver.observer.Observer`, which also mirrors panes for them. No module
here imports the terminal layer (``tmux/``, ``pty/``); import-linter checks it.
"""

"""Watching and steering runs live: the terminal dashboard, the web monitor, notifications.

Both views read the same :func:`politerm.ui.overview.collect_overview` data, kept fresh by
:class:`politerm.ui.live.LiveState` from store and tmux events, and mirror panes from the
control-mode ``%output`` stream (:mod:`politerm.ui.mirror`).
"""

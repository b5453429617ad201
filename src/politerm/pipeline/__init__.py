"""Pipelines: ``.pipeline`` files of agent steps with gates, parallel groups and handoffs.

:mod:`.parser` reads and validates files into a :class:`~.model.Pipeline`; :mod:`.runner`
runs one in a tmux session (one window per step, window 0 the control window);
:mod:`.state` keeps a run's state in the run store and ``.poli/state.<run id>``;
:mod:`.handoff` and :mod:`.worktrees` join parallel steps back together.
"""

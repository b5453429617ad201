"""Engine: the Planner⇄Executer router, session bring-up, templates, timeouts."""

from __future__ import annotations

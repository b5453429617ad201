"""Epic runs: work items burnt down one scoped agent session each, then one summary.

:mod:`.items` (bd adapter and the built-in queue), :mod:`.prompt` (layered prompts),
:mod:`.session` (one session: prompt, report, stop), :mod:`.go` (the run), :mod:`.summary`
(the omnibus summary), :mod:`.records` (JSONL export and import).
"""

from __future__ import annotations

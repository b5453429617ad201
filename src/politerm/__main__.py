"""``python -m politerm`` runs the ``poli`` command line."""

from __future__ import annotations

from politerm.cli import main

main()

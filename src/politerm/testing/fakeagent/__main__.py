"""``python -m politerm.testing.fakeagent``: run the fake agent TUI."""

from __future__ import annotations

if __name__ == "__main__":
    from politerm.testing.fakeagent.launch import main

    raise SystemExit(main())

"""``python -m politerm.ui.web DIR``: put the pinned xterm.js and fonts into ``DIR/node_modules``.

For a politerm whose wheel lacks them; then ``POLI_WEB_ASSETS=DIR poli web``.
"""

from __future__ import annotations

import sys

from politerm.ui.web.jsdeps import main

sys.exit(main())

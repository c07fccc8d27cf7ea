"""``python -m nbhelpers.bench ...``: the same as ``nbhelpers bench ...``."""

from __future__ import annotations

import sys

from .command import main

sys.exit(main())

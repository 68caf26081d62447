"""``python -m trizre``: the ``trizre`` command."""

import sys

from .cli import main

sys.exit(main())

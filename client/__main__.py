"""``python -m alicia.client``: same as the ``alicia-client`` console script."""

import sys

from .cli import main

sys.exit(main())

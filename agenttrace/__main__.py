"""``python -m agenttrace``: the same as the ``agenttrace`` command."""

import sys

from agenttrace.cli.main import main

sys.exit(main())

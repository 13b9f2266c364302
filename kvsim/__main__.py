"""``python -m kvsim`` runs the CLI."""

import sys

from kvsim.cli import main

sys.exit(main())

"""A target file that calls sys.exit(7) when imported."""

import sys

sys.exit(7)

"""The power-loss crash-state explorer (see README.md)."""

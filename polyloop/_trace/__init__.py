"""A run's trace from its records (no OpenTelemetry import: `polyloop.otel` carries it out)."""

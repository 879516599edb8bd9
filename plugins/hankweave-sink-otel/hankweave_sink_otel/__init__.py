"""hankweave runs as OpenTelemetry traces and metrics: the ``otel`` event sink (README.md)."""

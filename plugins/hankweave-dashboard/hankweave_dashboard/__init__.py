"""hankweave's local web dashboard: ``hankweave dashboard`` (see README.md)."""

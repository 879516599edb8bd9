"""Fakes and contract suites for testing hankweave and its plugins."""

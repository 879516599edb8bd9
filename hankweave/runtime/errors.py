"""Errors of the runtime's commands."""

from __future__ import annotations


class RuntimeCommandError(Exception):
    """An operation the runtime refuses (unknown codon, codon already running, ...)."""

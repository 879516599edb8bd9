"""The application layer: what puts the kernel's layers together for a command.

``launch`` runs a hank end to end (settings, preflight, execution directory, ownership, the
runtime with its control server); ``preflight`` checks a hank completely, plugins included;
``plugin_settings`` builds what settings enable from the installed plugins (harness settings,
event sinks).  Only the CLI and plugins (through :mod:`hankweave.api`) sit above it.
"""

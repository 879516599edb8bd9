"""The runtime: the orchestrator and the building blocks it calls.

``planner`` (execution plan and lazy loop expansion), ``failures`` (error classification and the
failure policy), ``rig`` (rig setup operations and the shell command runner), ``outputs`` (the
``outputFiles`` copy) and ``archive`` (``archiveOnSuccess``, the archive manifest and the
rollback restore) are pure or self-contained: they report progress through callbacks and never
touch the event bus or the state store themselves.
"""

"""The runtime: runs a hank's plan codon by codon, durably.

:mod:`~hankweave.runtime.orchestrator` holds :class:`Runtime`, built from parts each in its
own module (``docs/api.md`` lists them): the shared ``context``, the run ``lifecycle``, live
``control`` with its phase, one codon ``attempt`` and its ``completion``, the ``codon_runner``
that drives a harness, ``rollback`` and the ``reporter`` of every event.  ``planner`` (the plan
and lazy loop expansion), ``failures`` (error classification and the failure policy), ``rig``,
``outputs`` and ``archive`` are pure or self-contained: they report progress through callbacks
and never touch the event bus or the state store themselves.
"""

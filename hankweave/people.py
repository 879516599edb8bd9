"""Who a person at this machine is, for the records that name one (Agency's user
attribution): the run's ``user``, an answer's ``answeredBy``."""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping

USER_ENV = "HANKWEAVE_USER"
"""Names the person when the login name would not (a shared CI account, a container's uid)."""
UNKNOWN_USER = "unknown"


def current_user(given: str | None = None, env: Mapping[str, str] | None = None) -> str:
    """``given`` (``--user``), else ``$HANKWEAVE_USER``, else the login name, else
    ``unknown`` (a container's arbitrary uid has no passwd entry)."""
    env = os.environ if env is None else env
    for value in (given, env.get(USER_ENV)):
        if value and value.strip():
            return value.strip()
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return UNKNOWN_USER

"""Secrets in text the project writes: credentials inside URLs, masked wherever we print them.

A URL's userinfo (``redis://:hunter2@host``, ``https://user:token@collector``) is a credential
the person typed into a setting or a variable; it must not reach the terminal, ``server.log``,
an error message or an event.  :func:`mask_url_credentials` keeps the scheme, the user name and
the host, so a message still says which server it is about, and replaces the password (or a
lone token used as the user name) with ``***``.
"""

from __future__ import annotations

import re

__all__ = ["MASK", "mask_url_credentials"]

MASK = "***"

# scheme://userinfo@ where userinfo holds no '/', '@' or whitespace; the scheme is RFC 3986's.
_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/@:?#]*)(?::(?P<password>[^\s/@?#]*))?@")


def _mask(match: re.Match[str]) -> str:
    scheme, user, password = match["scheme"], match["user"], match["password"]
    if password is None:  # a lone token in the user name's place: https://TOKEN@host
        return f"{scheme}{MASK}@" if user else match[0]
    return f"{scheme}{user}:{MASK}@"


def mask_url_credentials(text: str) -> str:
    """``text`` with the password (or lone token) of every ``scheme://user:pass@`` masked."""
    if "@" not in text:
        return text
    return _URL_USERINFO.sub(_mask, text)

"""Where a codon's model is called: litellm's model string, the endpoint and the key.

The routes and the credential table are the kernel's (``hankweave.providers``), shared with the
sentinels' observer calls; this module re-exports what the harness's modules use.
"""

from __future__ import annotations

from hankweave.api import PROXY_URL_ENV, CredentialsError, ProviderOptions, Route, route

__all__ = ["PROXY_URL_ENV", "CredentialsError", "ProviderOptions", "Route", "route"]

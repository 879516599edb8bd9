"""The original's harness routing, as the lowest-priority ``select_harness`` answer.

A model's ``harness_override`` wins; otherwise the catalogue's provider entry decides (in the
built-in catalogue: Anthropic, and Anthropic models on Bedrock, to ``claude``; everything else
to ``pi``).  Only installed harnesses can be chosen: a missing one is an error that names the
distribution to install.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from hankweave.hookspecs import hookimpl

if TYPE_CHECKING:
    from hankweave.harness import Harness
    from hankweave.models import ModelEntry, ProviderEntry


@hookimpl(trylast=True)
def select_harness(
    model: ModelEntry, provider: ProviderEntry | None, harnesses: Mapping[str, type[Harness]]
) -> str | None:
    if model.harness_override:
        needed = model.harness_override
        if provider is not None and provider.harness == needed:
            package = provider.package
        else:
            # Harness distributions are named hankweave-harness-<name> (see DESIGN.md).
            package = f"hankweave-harness-{needed}"
    elif provider is not None:
        needed, package = provider.harness, provider.package
    else:
        return None
    if needed not in harnesses:
        from hankweave.harness import HarnessNotInstalledError

        raise HarnessNotInstalledError(
            f"Model {model.full_id} needs the {needed.capitalize()} harness; "
            f"install it with: pip install {package}"
        )
    return needed

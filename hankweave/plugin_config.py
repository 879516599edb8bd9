"""The one base of every plugin class's settings model.

A plugin class declares what users may configure for it as a pydantic model derived from
:class:`PluginConfig`: a harness's ``Config`` (``harnesses.<name>``), an event sink's
``Config`` (``events.sinks[].config``), a sentinel kind's ``Options`` (a sentinel config's
``options``).  The kernel validates the user's JSON with it, reports each problem at its JSON
path, and builds the class with the validated model.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class PluginConfig(BaseModel):
    """Strict (an unknown key is an error naming its JSON path), immutable, camelCase in the
    JSON files and snake_case in Python, with attribute docstrings as field descriptions.

    Give every field a default: a user who writes no settings gets the defaults.
    """

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
        use_attribute_docstrings=True, defer_build=True)


__all__ = ["PluginConfig"]

"""Reading events: the one typed entry point for every reader of the stream or the journal.

:func:`parse_event` turns a wire event (a journal line, a WebSocket message, what a sink is
handed) into an :data:`Event`: a pydantic discriminated union over ``type`` whose members carry
the catalogue's payload models (:data:`~hankweave.events.catalogue.EVENT_DATA_MODELS`), so
readers use attributes (``event.data.codon_id``) instead of ``.get(...)`` chains.  A type this
runtime does not know (a newer journal) parses into :class:`OtherEvent`, its data kept as the
plain object, so a reader never fails on a journal from another version.

Readers are tolerant where emitters are strict.  A payload that fits its model is validated as
the emitter validated it; one that does not (a field missing or of another shape: a journal
from another version, an event written by hand) is still read, field by field, and what is
missing or does not fit reads ``None`` (or the field's default).  Only an event that is not an
event at all (no ``type``, ``data`` not an object) raises :class:`EventReadError`.

:func:`read_transition` does the same for the state transition a ``state.transition`` event
carries, into the kernel's own transition models (:mod:`hankweave.state.transitions`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Annotated, Any, Generic, Literal, TypeAlias, TypeVar, Union, get_args, get_origin

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.alias_generators import to_camel

from hankweave.events.catalogue import (
    EVENT_DATA_MODELS,
    EventData,
    EventError,
    TransitionRecord,
)
from hankweave.state.transitions import StateTransition

__all__ = [
    "Event",
    "EventReadError",
    "KnownEvent",
    "OtherEvent",
    "parse_event",
    "read_model",
    "read_transition",
]

DataT = TypeVar("DataT")
Model = TypeVar("Model", bound=BaseModel)


class EventReadError(EventError):
    """A message that is not an event: it has no ``type``, or its ``data`` is not an object."""


class _Envelope(BaseModel, Generic[DataT]):
    """What every event carries (:class:`~hankweave.events.catalogue.ServerEvent`'s fields),
    each optional on the reading side: an event sent to one client has no ``seq``, a
    hand-written one may have no ``id``."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="allow", defer_build=True
    )

    seq: int | None = None
    schema_version: int | None = None
    id: str | None = None
    timestamp: str | None = None
    type: str
    data: DataT


class KnownEvent(_Envelope[EventData]):
    """An event of a type in the catalogue; ``data`` is an instance of the type's model."""


class OtherEvent(_Envelope[dict[str, Any]]):
    """An event of a type this runtime does not know; ``data`` is kept as it came."""


Event: TypeAlias = KnownEvent | OtherEvent
"""What :func:`parse_event` returns."""


@functools.cache
def _adapter() -> TypeAdapter[Any]:
    """The discriminated union: one envelope per catalogue type, ``type`` its literal tag.

    Built on first use from the catalogue (nothing is declared twice), so importing this module
    costs nothing until an event is read.  The tag is matched by pydantic itself; a type the
    catalogue does not have never reaches it (:func:`parse_event` reads it as
    :class:`OtherEvent`).
    """
    members = tuple(
        create_model(
            f"{model.__name__.removesuffix('Data')}Event",
            __base__=KnownEvent,
            __module__=__name__,
            type=(Literal[kind], ...),  # type: ignore[arg-type]
            data=(model, ...),
        )
        for kind, model in EVENT_DATA_MODELS.items()
    )
    union: Any = Annotated[Union[members], Field(discriminator="type")]  # noqa: UP007
    return TypeAdapter(union)


def parse_event(raw: Mapping[str, Any]) -> Event:
    """The typed event of the wire object ``raw`` (camelCase keys, as journaled and sent).

    An absent ``data`` reads as empty.  See the module docstring for what a payload that does
    not fit its model becomes.

    Raises:
        EventReadError: ``raw`` has no string ``type``, or its ``data`` is not an object.
    """
    kind = raw.get("type")
    data = raw.get("data")
    if not isinstance(kind, str):
        raise EventReadError(f"not an event: its type is {kind!r}")
    if data is None:
        raw, data = {**raw, "data": {}}, {}
    elif not isinstance(data, Mapping):
        raise EventReadError(f"event {kind!r}: its data is a {type(data).__name__}, not an object")
    model = EVENT_DATA_MODELS.get(kind)
    try:
        if model is None:
            return OtherEvent.model_validate(raw)
        event: KnownEvent = _adapter().validate_python(raw)
        return event
    except ValidationError:
        pass
    envelope = _fitting(KnownEvent if model else OtherEvent, {**raw, "data": None})
    if model is None:  # the envelope itself did not fit
        return OtherEvent.model_construct(**{**envelope, "data": dict(data)})
    return KnownEvent.model_construct(**{**envelope, "data": read_model(model, data)})


def read_model(model: type[Model], raw: Mapping[str, Any]) -> Model:
    """``raw`` validated as ``model``; failing that, read field by field (see the module
    docstring): what is missing or does not fit is ``None`` or the field's default."""
    try:
        return model.model_validate(raw)
    except ValidationError:
        return model.model_construct(**_fitting(model, raw))


def _fitting(model: type[BaseModel], raw: Mapping[str, Any]) -> dict[str, Any]:
    """Each field of ``model`` from ``raw`` where it fits, ``None`` or its default where not;
    keys ``model`` does not declare are kept (as extra fields)."""
    values: dict[str, Any] = {}
    known: set[str] = set()
    for name, field in model.model_fields.items():
        key = field.alias if field.alias is not None and field.alias in raw else name
        known.update((name, key))
        if key not in raw:
            values[name] = (None if field.is_required()
                            else field.get_default(call_default_factory=True))
            continue
        values[name] = _field_value(model, name, raw[key])
    values.update((key, value) for key, value in raw.items() if key not in known)
    return values


def _field_value(model: type[BaseModel], name: str, value: Any) -> Any:
    try:
        return _field_adapter(model, name).validate_python(value)
    except ValidationError:
        pass
    inner = _model_in(model.model_fields[name].annotation)
    if inner is None:
        return None
    item, many = inner
    if many and isinstance(value, list):
        return [read_model(item, entry) for entry in value if isinstance(entry, Mapping)]
    if not many and isinstance(value, Mapping):
        return read_model(item, value)
    return None


@functools.cache
def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    field = model.model_fields[name]
    # The field's type with its constraints, without its alias (the adapter sees the value).
    extras: list[Any] = list(field.metadata)
    if field.discriminator is not None:
        extras.append(Field(discriminator=field.discriminator))
    annotation: Any = Annotated[(field.annotation, *extras)] if extras else field.annotation
    return TypeAdapter(annotation)


def _model_in(annotation: Any) -> tuple[type[BaseModel], bool] | None:
    """The model a field holds: one (``X``, ``X | None``) or a list of them (``list[X]``).
    ``None`` for a union of several models: which one a partial value is cannot be told."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    if get_origin(annotation) is list:
        found = _model_in(get_args(annotation)[0])
        return (found[0], True) if found else None
    if get_origin(annotation) is Annotated:
        return _model_in(get_args(annotation)[0])
    held = [inner for arg in get_args(annotation) if (inner := _model_in(arg)) is not None]
    return held[0] if len(held) == 1 else None


@functools.cache
def _transition_models() -> dict[str, type[BaseModel]]:
    union = get_args(StateTransition)[0]
    return {get_args(member.model_fields["type"].annotation)[0]: member
            for member in get_args(union)}


def read_transition(record: TransitionRecord | Mapping[str, Any] | None, *,
                    at: str | None = None) -> StateTransition | None:
    """The kernel's typed transition of a ``state.transition`` event's ``transition`` (as
    tolerant as :func:`read_model`); ``None`` for no transition or a type this runtime does not
    know.  Its ``timestamp`` is the record's own, else ``at`` (give the event's: a transition
    read without either gets the time it was read)."""
    if record is None:
        return None
    raw = (record if isinstance(record, Mapping)
           else {**(record.model_extra or {}), "type": record.type, "data": record.data})
    model = _transition_models().get(str(raw.get("type")))
    if model is None:
        return None
    if at is not None and "timestamp" not in raw:
        raw = {**raw, "timestamp": at}
    if not isinstance(raw.get("data"), Mapping):
        raw = {**raw, "data": {}}
    transition: StateTransition = read_model(model, raw)  # type: ignore[assignment]
    return transition

"""Every error of memvault.errors crosses the wire with its class, message and every attribute."""

from __future__ import annotations

import collections.abc
import inspect
import json
import types
import typing
from typing import Any

import pytest

from memvault import errors
from memvault.contract.errors import ContentRejected, MemvaultError
from memvault_http_remote.errorwire import decode_error, encode_error, status_for


def _hierarchy(cls: type[MemvaultError] = MemvaultError) -> list[type[MemvaultError]]:
    """Walked independently of the codec: every subclass defined in memvault.errors."""
    found = [cls] if cls.__module__ == errors.__name__ else []
    for sub in cls.__subclasses__():
        found += [c for c in _hierarchy(sub) if c not in found]
    return found


def _sample(hint: Any, name: str, default: Any) -> Any:
    """A value unlike the default, so a dropped attribute cannot pass by coincidence."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
    for option in options:
        if typing.get_origin(option) is tuple:  # JSON carries it as a list: it must come back a tuple
            return tuple(range(7, 7 + len(typing.get_args(option))))
        if option is float:
            return 0.75
    if hint is bool:
        return not default if isinstance(default, bool) else True
    if hint is int:
        return 4301
    if typing.get_origin(hint) is list:
        return [f"{name}-1", f"{name}-2"]
    if typing.get_origin(hint) is collections.abc.Sequence:  # a sequence of (plugin, distribution, error)
        (item,) = typing.get_args(hint)
        width = len(typing.get_args(item)) if typing.get_origin(item) is tuple else 0
        return [tuple(f"{name}-{i}" for i in range(width))] if width else [f"{name}-1"]
    return f"{name}-value"


def _instance(cls: type[MemvaultError]) -> tuple[MemvaultError, dict[str, Any]]:
    owner = next(c for c in cls.__mro__ if "__init__" in vars(c))
    if owner.__module__ != errors.__name__:  # Exception's or OSError's own *args
        return cls(f"{cls.__name__}: what went wrong, and how to fix it"), {}
    hints = typing.get_type_hints(cls.__init__)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    attributes: dict[str, Any] = {}
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name == "self":
            continue
        value = _sample(hints.get(name), name, param.default)
        if name != "message":
            attributes[name] = value
        (kwargs.__setitem__(name, value) if param.kind is param.KEYWORD_ONLY else args.append(value))
    return cls(*args, **kwargs), attributes


def test_the_codec_knows_every_class_of_the_hierarchy() -> None:
    from memvault_http_remote.errorwire import WIRE_TYPES

    assert set(WIRE_TYPES.values()) == set(_hierarchy())
    assert len(_hierarchy()) >= 10


@pytest.mark.parametrize("cls", _hierarchy(), ids=lambda c: c.__name__)
def test_every_error_attribute_round_trips_through_the_wire_codec(cls: type[MemvaultError]) -> None:
    original, attributes = _instance(cls)
    body = json.loads(json.dumps(encode_error(original)))
    decoded = decode_error(status_for(original), body, "memvault service at http://x (verb)")
    assert type(decoded) is cls
    for name, value in attributes.items():
        assert getattr(decoded, name) == value, f"{cls.__name__}.{name} was lost on the wire"
        assert getattr(original, name) == value
    assert str(original) in str(decoded)


def test_content_rejected_without_a_kept_copy_says_so_on_the_client() -> None:
    """The server kept no quarantine copy: the client must not claim one exists."""
    original = ContentRejected(category="c", pattern="p", sha256="0" * 64, detail="store down", kept=False)
    decoded = decode_error(422, json.loads(json.dumps(encode_error(original))), "test")
    assert isinstance(decoded, ContentRejected)
    assert (decoded.kept, decoded.detail) == (False, "store down")
    assert str(decoded) == str(original)
    assert "no quarantine copy was kept" in str(decoded)


@pytest.mark.parametrize("cls", [c for c in _hierarchy() if _instance(c)[1]], ids=lambda c: c.__name__)
def test_a_body_with_a_mistyped_attribute_is_a_malformed_upstream_error(cls: type[MemvaultError]) -> None:
    original, attributes = _instance(cls)
    body = encode_error(original)
    body["error"][next(iter(attributes))] = {"not": "a scalar"}
    decoded = decode_error(500, body, "test")
    assert type(decoded) is errors.UpstreamError
    assert "malformed" in str(decoded)

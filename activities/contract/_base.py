"""What every payload is: a frozen pydantic model with no extra fields, and the compact
form of the ones a Run sends on every turn (written without their defaults)."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    model_serializer,
)

from psych_runtime.specs import McpServer, Scope, drop_defaults


class _Payload(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Compact(_Payload):
    """A payload written without the fields that hold their default (read back with them).

    For the payloads an MCP Run sends on every turn: each default left out is history bytes
    not spent on every turn of every Run.
    """

    @model_serializer(mode="wrap")
    def _without_defaults(
        self, handler: SerializerFunctionWrapHandler, info: SerializationInfo
    ) -> dict[str, Any]:
        # Every payload a turn sends passes here: the fields are dropped from the dict the
        # handler made, and a value still holding its default object is not compared.
        data = drop_defaults(self, handler(self))
        values = self.__dict__
        for key, implied in self._implied().items():
            if key in data and values[key] == implied:
                del data[key]
        return data

    def _implied(self) -> dict[str, Any]:
        """Fields whose value the other fields imply: left out when they hold it (a class
        that has some fills them back in when they are missing)."""
        return {}


def _compact_scope(scope: Scope) -> dict[str, Any]:
    """A Scope as JSON without its defaults (no principal, no labels): the model and tool
    calls carry it every turn."""
    return scope.model_dump(mode="json", exclude_defaults=True)


LATENCY_DECIMALS = 3
"""Latencies travel rounded to the microsecond: float noise past it is history bytes."""


def _compact_server(server: McpServer) -> dict[str, Any]:
    """An ``McpServer`` as JSON without its default fields (the Spec's own dump keeps them:
    it is what a Version hashes)."""
    return server.model_dump(mode="json", exclude_defaults=True)

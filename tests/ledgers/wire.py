"""What Redis clients write: every write of every connection, decoded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import hiredis
import pytest
from redis.asyncio import Connection

Command = tuple[bytes, ...]


@dataclass(frozen=True)
class Trip:
    """One write: the connection that made it and the commands it carried. A client
    that never waits for a reply before its next write makes one round trip per write."""

    connection: int  # id() of the connection object
    commands: list[Command]


class RoundTrips:
    """Records every write of every redis-py asyncio connection while installed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trips: list[Trip] = []
        send: Any = Connection.send_packed_command  # redis-py leaves it untyped

        async def recording(connection: Connection, command: Any, *args: Any, **kw: Any) -> Any:
            reader = hiredis.Reader()  # a command is written as a RESP array, like a reply
            reader.feed(command if isinstance(command, bytes) else b"".join(command))
            self.trips.append(Trip(id(connection), list(iter(reader.gets, False))))
            return await send(connection, command, *args, **kw)

        monkeypatch.setattr(Connection, "send_packed_command", recording)

    def names(self) -> list[list[str]]:
        """Per write, the name of each command ("EVALSHA", "SCRIPT LOAD")."""
        return [[_name(command) for command in trip.commands] for trip in self.trips]


def _name(command: Command) -> str:
    words = command[:2] if command[0].upper() == b"SCRIPT" else command[:1]
    return " ".join(word.decode().upper() for word in words)

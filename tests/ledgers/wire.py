"""What the ledger writes to Redis: every write of every batcher connection, decoded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import hiredis
import pytest

from gateway.ledgers import batching

Command = tuple[bytes, ...]


@dataclass(frozen=True)
class Trip:
    """One write: the connection that made it and the commands it carried. A client
    that never waits for a reply before its next write makes one round trip per write."""

    connection: int  # id() of the batcher's link on a connection
    commands: list[Command]


class RoundTrips:
    """Records every write of every :class:`~gateway.ledgers.batching.ScriptBatcher`
    connection while installed (they all go through ``_Link.write``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.trips: list[Trip] = []
        write: Any = batching._Link.write

        def recording(link: Any, loads: list[bytes], calls: list[Any]) -> None:
            reader = hiredis.Reader()  # a command is written as a RESP array, like a reply
            reader.feed(b"".join([*loads, *(call.packed for call in calls)]))
            self.trips.append(Trip(id(link), list(iter(reader.gets, False))))
            write(link, loads, calls)

        monkeypatch.setattr(batching._Link, "write", recording)

    def names(self) -> list[list[str]]:
        """Per write, the name of each command ("EVALSHA", "SCRIPT LOAD")."""
        return [[_name(command) for command in trip.commands] for trip in self.trips]


def _name(command: Command) -> str:
    words = command[:2] if command[0].upper() == b"SCRIPT" else command[:1]
    return " ".join(word.decode().upper() for word in words)

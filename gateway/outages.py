"""A dependency that is down: which errors mean the database is out of reach, and a
log that tells an outage in a few lines rather than one per refused call.

During an outage every call that needs the dependency fails the same way, thousands a
second on the inference path; one log line each would bury everything else (11,000
lines in 5 s per gateway, measured). :class:`Outage` logs its start once at ERROR,
then at most every ``report_every`` seconds a WARNING with the count of failures, and
its end at INFO with how long it lasted and how many calls failed::

    redis down: LedgerUnavailableError: TimeoutError: Timeout reading from Redis
    redis still down after 30 s: 91442 calls failed so far (last: LedgerUnavailable...)
    redis back after 41.2 s: 120012 calls failed meanwhile
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType

from sqlalchemy import exc as sa_exc

__all__ = [
    "DATABASE_ERRORS",
    "DATABASE_RETRY_AFTER",
    "REPORT_EVERY_SECONDS",
    "Outage",
    "Outages",
    "database_unavailable",
]

REPORT_EVERY_SECONDS = 30.0
DATABASE_RETRY_AFTER = "2"  # seconds: a restarted PostgreSQL takes about that to accept
_MAX_WHY_CHARS = 300

DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    sa_exc.SQLAlchemyError,
    OSError,  # TimeoutError too: asyncpg's connect raises them, and SQLAlchemy lets them by
)
"""What a database call may raise when the database is out of reach, with other
errors besides: :func:`database_unavailable` tells them apart."""

# SQLSTATE classes of a server that cannot serve: connection exception (08),
# insufficient resources (53: too many connections, ...), operator intervention (57P:
# shutting down, starting up, crashed).
_UNAVAILABLE_SQLSTATES = ("08", "53", "57P")
# Modules whose frames an OSError must pass through to be the database's.
_DRIVER_MODULES = ("sqlalchemy.", "asyncpg.", "aiosqlite.", "sqlite3.")


def database_unavailable(err: BaseException) -> bool:
    """Whether ``err`` means the database cannot be reached or cannot serve now (not a
    bad query, a constraint, or an unrelated ``OSError`` such as a missing file)."""
    if isinstance(
        err,
        sa_exc.OperationalError
        | sa_exc.InterfaceError
        | sa_exc.DisconnectionError
        | sa_exc.TimeoutError,  # no pooled connection freed in time
    ):
        return True
    if isinstance(err, sa_exc.DBAPIError):
        # The driver's error; SQLAlchemy's asyncpg adapter gives it the server's SQLSTATE.
        sqlstate = getattr(err.orig, "sqlstate", None)
        return err.connection_invalidated or (
            isinstance(sqlstate, str) and sqlstate.startswith(_UNAVAILABLE_SQLSTATES)
        )
    if isinstance(err, OSError):
        return _raised_in_driver(err.__traceback__)
    return False


def _raised_in_driver(tb: TracebackType | None) -> bool:
    while tb is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if isinstance(module, str) and (module + ".").startswith(_DRIVER_MODULES):
            return True
        tb = tb.tb_next
    return False


class Outage:
    """The state of one dependency as its callers see it: up, or down since when and
    with how many failed calls. Not thread-safe: one event loop reports to it.

    Usage::

        outage = Outage("redis")
        began = outage.now()
        try:
            reply = await call()
        except LedgerUnavailableError as err:
            outage.failed(err)   # logs the first one; counts the rest
            raise
        outage.recovered(began)  # logs the end of an outage, if one was under way
    """

    def __init__(
        self,
        name: str,
        *,
        report_every: float = REPORT_EVERY_SECONDS,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._report_every = report_every
        self._log = logger or logging.getLogger(__name__)
        self._clock = clock
        self._since: float | None = None
        self._reported = 0.0
        self._failures = 0

    @property
    def down(self) -> bool:
        return self._since is not None

    @property
    def failures(self) -> int:
        """Calls failed in the outage under way (0 when up)."""
        return self._failures

    def failed(self, why: object) -> None:
        """A call failed because the dependency is out of reach (``why``: the error)."""
        now = self._clock()
        self._failures += 1
        if self._since is None:
            self._since = self._reported = now
            self._log.error("%s down: %s", self.name, _describe(why))
        elif now - self._reported >= self._report_every:
            self._reported = now
            self._log.warning(
                "%s still down after %.0f s: %d calls failed so far (last: %s)",
                self.name,
                now - self._since,
                self._failures,
                _describe(why),
            )

    def now(self) -> float:
        """The outage's clock: what a call notes as it begins, for :meth:`recovered`."""
        return self._clock()

    def recovered(self, began: float | None = None) -> None:
        """A call succeeded: an outage under way is over. Cheap when none is.

        ``began`` (from :meth:`now`) is when the call started: one that started before
        the outage was seen may have finished on a connection the server was still
        closing, which says nothing about whether it is back."""
        if self._since is None or (began is not None and began < self._since):
            return
        self._log.info(
            "%s back after %.1f s: %d calls failed meanwhile",
            self.name,
            self._clock() - self._since,
            self._failures,
        )
        self._since = None
        self._failures = 0


@dataclass(frozen=True)
class Outages:
    """The outages of the gateway's shared dependencies, one :class:`Outage` each."""

    database: Outage = field(default_factory=lambda: Outage("database"))
    redis: Outage = field(default_factory=lambda: Outage("redis"))


def _describe(why: object) -> str:
    if isinstance(why, sa_exc.DBAPIError) and why.orig is not None:
        # The driver's own error: SQLAlchemy's text adds the statement and its parameters.
        why = why.orig.__cause__ or why.orig
    if isinstance(why, BaseException):
        text = f"{type(why).__name__}: {why}" if str(why) else type(why).__name__
    else:
        text = str(why)
    return " ".join(text.split())[:_MAX_WHY_CHARS]

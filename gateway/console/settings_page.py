"""The console's platform settings (platform admins): fair sharing, the GPU-hour budget
period, prices and the inference defaults, read from ``GET /api/v1/admin/settings`` and
saved with ``PUT`` naming the version read (``If-Match``: 412 when someone changed them
since; the form then shows theirs). The API checks every value and names the field at
fault; its reason is shown above the form as typed."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post

from gateway.console.base import FormError, form_text, page
from gateway.console.html import (
    esc,
    field,
    form,
    form_error,
    select,
    textarea,
    version_field,
)
from gateway.console.quota_grid import PlatformPages, version_of
from gateway.console.sessions import Session

__all__ = ["SettingsPages", "settings_from_form"]

PERIODS = ("month", "week", "day")
HERE = "/console/settings"
PRICE_HELP = (
    "One price a line: flavor, charged resource (a <resource>-hours such as "
    "nvidia.com/gpu-hours, input-tokens or output-tokens: per million), price. "
    "No lines: no prices (reports give amounts only)."
)
WAIT_HELP = "One queue a line: the queue, then how long (seconds, up to 600) refused calls wait."


def _price_lines(prices: Any) -> str:
    if not isinstance(prices, dict):
        return ""
    return "\n".join(
        f"{flavor} {resource} {price}"
        for flavor, rates in (prices.get("flavors") or {}).items()
        if isinstance(rates, dict)
        for resource, price in rates.items()
    )


def _wait_lines(inference: Any) -> str:
    waiting = inference.get("waiting") if isinstance(inference, dict) else None
    return "\n".join(
        f"{w.get('queue')} {w.get('max_wait_seconds')}"
        for w in waiting or []
        if isinstance(w, dict)
    )


def _positive(data: Any, name: str) -> int | None:
    text = form_text(data, name, max_length=20, required=False).replace(",", "").replace("_", "")
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise FormError(f"{name.replace('_', ' ')}: a whole number of tokens, at least 1")
    return int(text)


def settings_from_form(data: Any) -> dict[str, Any]:
    """The settings the form says, as ``PUT /api/v1/admin/settings`` takes them;
    :class:`FormError` names the line at fault (the API checks the values)."""
    period = form_text(data, "budget_period", max_length=10)
    if period not in PERIODS:
        raise FormError(f"budget period: one of {', '.join(PERIODS)}")
    flavors: dict[str, dict[str, str]] = {}
    for number, line in enumerate(
        form_text(data, "prices", max_length=65536, required=False).splitlines(), start=1
    ):
        words = line.split()
        if not words:
            continue
        if len(words) != 3:
            raise FormError(f"prices, line {number}: flavor, resource, price")
        flavor, resource, price = words
        flavors.setdefault(flavor, {})[resource] = price
    currency = form_text(data, "currency", max_length=3, required=False).upper() or "USD"
    waiting = []
    for number, line in enumerate(
        form_text(data, "waiting", max_length=65536, required=False).splitlines(), start=1
    ):
        words = line.split()
        if not words:
            continue
        try:
            if len(words) != 2:
                raise ValueError
            seconds = float(words[1])
        except ValueError:
            raise FormError(f"waiting, line {number}: a queue, then seconds") from None
        waiting.append({"queue": words[0], "max_wait_seconds": seconds})
    inference: dict[str, Any] = {"waiting": waiting}
    for name in ("default_max_tokens", "max_call_tokens"):
        if (value := _positive(data, name)) is not None:
            inference[name] = value
    return {
        "fair_sharing": data.get("fair_sharing") == "on",
        "budget_period": period,
        "prices": {"currency": currency, "flavors": flavors} if flavors else None,
        "inference": inference,
    }


class SettingsPages(PlatformPages):
    @get("/settings")
    async def settings(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        return await self._page(request, session)

    async def _page(
        self,
        request: Request[Any, Any, Any],
        session: Session,
        *,
        error: str = "",
        data: Any = None,
        status: int = 200,
    ) -> Response[Any]:
        answer = await self.api(request, session).get("/api/v1/admin/settings")
        if not answer.ok:
            return await self.failed(request, session, answer, HERE)
        spec = answer.body.get("spec") or {}
        version = answer.body.get("version")
        inference = spec.get("inference") or {}
        prices = spec.get("prices") or {}
        if data is not None:
            values = {k: data.get(k) or "" for k in _FIELDS}
            fair = data.get("fair_sharing") == "on"
        else:
            values = {
                "budget_period": spec.get("budget_period") or "month",
                "currency": prices.get("currency") or "USD",
                "prices": _price_lines(prices),
                "default_max_tokens": inference.get("default_max_tokens", ""),
                "max_call_tokens": inference.get("max_call_tokens", ""),
                "waiting": _wait_lines(inference),
            }
            fair = bool(spec.get("fair_sharing"))
        checkbox = (
            '<label for="fair_sharing">fair sharing</label>'
            '<input type="checkbox" id="fair_sharing" name="fair_sharing" value="on"'
            f'{" checked" if fair else ""} data-testid="fair-sharing">'
        )
        edit = form(
            f"{HERE}/save",
            session.csrf,
            version_field(version)
            + "<h2>Quota</h2>"
            + '<p class="muted">Fair sharing and the period GPU-hour budgets are granted for.'
            ' Flavors, cohorts and queues: <a href="/console/flavors">flavors</a>,'
            ' <a href="/console/cohorts">cohorts</a>, <a href="/console/queues">queues</a>.</p>'
            + checkbox
            + '<span class="muted">(cohorts and queues share by their weights)</span>'
            + select("budget_period", "GPU-hour budget period", PERIODS, values["budget_period"])
            + "<h2>Prices</h2>"
            + field("currency", "currency", values["currency"], maxlength=3, size=4)
            + textarea("prices", "prices", str(values["prices"]), rows=4)
            + f'<p class="muted">{esc(PRICE_HELP)}</p>'
            + "<h2>Inference defaults</h2>"
            + field(
                "default_max_tokens",
                "max tokens of a call that names none",
                values["default_max_tokens"],
                maxlength=20,
                size=10,
                placeholder="1024",
            )
            + field(
                "max_call_tokens",
                "most tokens one call may reserve",
                values["max_call_tokens"],
                maxlength=20,
                size=12,
                placeholder="1000000",
            )
            + textarea("waiting", "waiting lines", str(values["waiting"]), rows=3)
            + f'<p class="muted">{esc(WAIT_HELP)}</p>',
            button="Save settings",
            css="editor settings",
            test_id="settings",
        )
        shown = form_error(error)
        body = shown + f'<p class="muted">version {esc(version)}</p><div class="card">{edit}</div>'
        return page(session, "Settings", body, HERE, status)

    @post("/settings/save")
    async def save(self, request: Request[Any, Any, Any]) -> Response[Any]:
        session = await self.platform(request)
        if isinstance(session, Response):
            return session
        data = await request.form()
        try:
            version = version_of(data)
            spec = settings_from_form(data)
        except FormError as err:
            return await self._page(request, session, error=str(err), data=data, status=422)
        return await self.change(
            request,
            session,
            "PUT",
            "/api/v1/admin/settings",
            version,
            json=spec,
            again=lambda error, status: self._page(
                request, session, error=error, data=data, status=status
            ),
            afresh=lambda error, status: self._page(request, session, error=error, status=status),
            stale=(
                "Not saved: someone changed the settings since you opened them; the form now"
                " shows theirs"
            ),
            done="Settings saved.",
            to=HERE,
        )


_FIELDS = (
    "budget_period",
    "currency",
    "prices",
    "default_max_tokens",
    "max_call_tokens",
    "waiting",
)

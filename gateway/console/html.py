"""HTML for the console's pages: plain strings, every value escaped on the way in.

No template engine: the pages are small, and :func:`esc` on every value (the only way a
value enters a page here) keeps them safe. No inline script or style anywhere, so the
Content-Security-Policy can forbid both.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any
from urllib.parse import urlencode

__all__ = [
    "bar_chart",
    "definition",
    "esc",
    "field",
    "filters",
    "form",
    "form_error",
    "layout",
    "message",
    "object_page",
    "pager",
    "select",
    "table",
    "textarea",
    "usage_bar",
    "version_field",
]


def esc(value: object) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def form(
    action: str,
    csrf: str,
    inner: str,
    *,
    button: str,
    danger: bool = False,
    more: str = "",
    test_id: str = "",
    css: str = "inline",
) -> str:
    """A POST form carrying the session's CSRF token; ``more``: further buttons (HTML)."""
    kind = "danger" if danger else "primary"
    ident = f' data-testid="{esc(test_id)}"' if test_id else ""
    return (
        f'<form method="post" action="{esc(action)}" class="{esc(css)}"{ident}>'
        f'<input type="hidden" name="csrf" value="{esc(csrf)}">{inner}'
        f'<button type="submit" class="{kind}">{esc(button)}</button>{more}</form>'
    )


def field(
    name: str,
    label: str,
    value: object = "",
    *,
    ident: str = "",
    required: bool = False,
    maxlength: int = 200,
    pattern: str = "",
    placeholder: str = "",
    size: int = 0,
    kind: str = "text",
) -> str:
    """A labelled input; every attribute escaped."""
    ident = ident or name
    extra = (
        (" required" if required else "")
        + (f' pattern="{esc(pattern)}"' if pattern else "")
        + (f' placeholder="{esc(placeholder)}"' if placeholder else "")
        + (f' size="{size}"' if size else "")
    )
    return (
        f'<label for="{esc(ident)}">{esc(label)}</label>'
        f'<input id="{esc(ident)}" name="{esc(name)}" type="{esc(kind)}"'
        f' maxlength="{maxlength}" value="{esc(value)}"{extra}>'
    )


def select(
    name: str, label: str, choices: Sequence[str], chosen: str = "", *, empty: str = "any"
) -> str:
    """A labelled select of ``choices`` (the empty choice reads ``empty``)."""
    options = "".join(
        f'<option value="{esc(c)}"{" selected" if c == chosen else ""}>{esc(c or empty)}</option>'
        for c in choices
    )
    return (
        f'<label for="{esc(name)}">{esc(label)}</label>'
        f'<select id="{esc(name)}" name="{esc(name)}">{options}</select>'
    )


def textarea(name: str, label: str, value: str, *, rows: int = 8, maxlength: int = 65536) -> str:
    return (
        f'<label for="{esc(name)}">{esc(label)}</label>'
        f'<textarea id="{esc(name)}" name="{esc(name)}" rows="{rows}" cols="80"'
        f' maxlength="{maxlength}" spellcheck="false">{esc(value)}</textarea>'
    )


def filters(action: str, inner: str, *, button: str = "Filter") -> str:
    """A GET form of filters (no CSRF token: it changes nothing)."""
    return (
        f'<form method="get" action="{esc(action)}" class="inline filters">{inner}'
        f'<button type="submit">{esc(button)}</button></form>'
    )


def pager(
    here: str, params: dict[str, str], next_cursor: object, *, label: str = "next page"
) -> str:
    """The link to the page after this one (the API's ``next_cursor``), keeping the
    filters in ``params``; nothing on the last page."""
    if not isinstance(next_cursor, str) or not next_cursor:
        return ""
    query = urlencode({**params, "cursor": next_cursor})
    link = f'<a href="{esc(here)}?{esc(query)}" data-testid="next">{esc(label)}</a>'
    return f'<p class="pager">{link}</p>'


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], *, test_id: str = "") -> str:
    """A table; ``rows`` are already HTML (escape their values with :func:`esc`)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    ident = f' data-testid="{esc(test_id)}"' if test_id else ""
    empty = "" if body else f'<tr><td colspan="{len(headers)}" class="muted">none</td></tr>'
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}{empty}</tbody></table>"


def bar_chart(title: str, bars: Sequence[tuple[str, str]], *, unit: str = "") -> str:
    """Horizontal bars as SVG (no script, no style attribute); values are decimal text."""
    values: list[tuple[str, Decimal]] = []
    for label, text in bars:
        try:
            values.append((label, Decimal(text)))
        except (InvalidOperation, ValueError):
            continue
    if not values:
        return ""
    top = max(v for _, v in values) or Decimal(1)
    row, width, label_width = 24, 640, 200
    parts = []
    for i, (label, value) in enumerate(values):
        y = i * row
        length = int(Decimal(width - label_width - 120) * value / top) if top > 0 else 0
        parts.append(
            f'<text x="0" y="{y + 16}" class="label">{esc(label)}</text>'
            f'<rect x="{label_width}" y="{y + 4}" width="{max(length, 1)}" height="16"'
            f' class="bar"><title>{esc(label)}: {esc(value)} {esc(unit)}</title></rect>'
            f'<text x="{label_width + max(length, 1) + 6}" y="{y + 16}" class="value">'
            f"{esc(value)} {esc(unit)}</text>"
        )
    height = len(values) * row + 8
    return (
        f'<figure class="chart"><figcaption>{esc(title)}</figcaption>'
        f'<svg role="img" aria-label="{esc(title)}" width="{width}" height="{height}"'
        f' viewBox="0 0 {width} {height}">{"".join(parts)}</svg></figure>'
    )


def usage_bar(usage: object, nominal: object, borrowed: object = 0) -> str:
    """A small SVG bar: the nominal quota as the track, the usage within it, and what is
    borrowed beyond it in another colour; with the numbers beside it."""
    try:
        used, quota, extra = (Decimal(str(v or 0)) for v in (usage, nominal, borrowed))
    except (InvalidOperation, ValueError):
        return esc(f"{usage} / {nominal}")
    width = 160
    scale = max(quota, used, Decimal(1))
    own = min(used, quota)
    x_quota = int(width * quota / scale)
    x_own = int(width * own / scale)
    x_extra = int(width * min(extra, max(used - quota, Decimal(0))) / scale)
    label = f"{_plain(used)} / {_plain(quota)}"
    return (
        f'<svg class="usage" width="{width}" height="12" role="img" aria-label="{esc(label)}">'
        f'<rect x="0" y="0" width="{x_quota}" height="12" class="track"/>'
        f'<rect x="0" y="0" width="{x_own}" height="12" class="used"/>'
        f'<rect x="{x_quota}" y="0" width="{x_extra}" height="12" class="borrowed"/>'
        f'</svg> <span class="numbers">{esc(label)}</span>'
    )


def _plain(value: Decimal) -> str:
    return format(value.normalize(), "f") if value == value.to_integral() else str(value)


def layout(
    title: str,
    body: str,
    *,
    who: str | None = None,
    csrf: str | None = None,
    nav: Sequence[tuple[str, str]] = (),
    current: str = "",
    flash: str = "",
) -> str:
    """The page: its navigation (when signed in), a flash message, the body."""
    links = "".join(
        f'<a href="{esc(href)}"{" class=current" if href == current else ""}>{esc(name)}</a>'
        for name, href in nav
    )
    account = ""
    if who is not None and csrf is not None:
        account = f'<span class="who" data-testid="who">{esc(who)}</span>' + form(
            "/console/logout", csrf, "", button="Sign out"
        )
    header = (
        f'<header><strong class="brand">Ignara console</strong><nav>{links}</nav>'
        f'<div class="account">{account}</div></header>'
    )
    return (
        "<!doctype html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)} · Ignara</title>"
        '<link rel="stylesheet" href="/console/static/console.css">'
        '<script src="/console/static/console.js" defer></script>'
        f"</head><body>{header}<main><h1>{esc(title)}</h1>{flash}{body}</main></body></html>"
    )


def message(kind: str, text: str, *, test_id: str = "") -> str:
    ident = f' data-testid="{esc(test_id)}"' if test_id else ""
    return f'<div class="{esc(kind)}"{ident}>{text}</div>'


def definition(pairs: Iterable[tuple[str, Any]]) -> str:
    """A definition list of already-escaped HTML values."""
    return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def form_error(error: str) -> str:
    """Why a form was refused (``error``, escaped here), above it; nothing when it was not."""
    return error and message("error", esc(error), test_id="form-error")


def version_field(version: object) -> str:
    """The version a form was drawn from, sent back for ``If-Match``."""
    return f'<input type="hidden" name="version" value="{esc(version)}">'


def object_page(error: str, about: str, edit: str, remove: str) -> str:
    """The body of one configured object's page: why a form was refused (``error``,
    escaped here), ``about`` it (HTML), its edit form in a card, and its delete form."""
    return f'{form_error(error)}{about}<div class="card">{edit}</div><h2>Delete</h2>{remove}'

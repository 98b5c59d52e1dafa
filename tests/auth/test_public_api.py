"""``gateway.auth`` exports exactly its public names, so a change to them is visible."""

from __future__ import annotations

import gateway.auth


def test_all_is_unique_and_resolvable() -> None:
    names = gateway.auth.__all__
    assert len(set(names)) == len(names)
    for name in names:
        assert getattr(gateway.auth, name) is not None


def test_all_lists_every_public_name() -> None:
    public = {
        name
        for name in vars(gateway.auth)
        if not name.startswith("_")
        and name not in {"annotations", "authenticator", "errors", "identity", "keys"}
        and name not in {"actor", "issue", "middleware", "oidc", "store"}
    }
    assert public == set(gateway.auth.__all__)

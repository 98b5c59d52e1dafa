"""The `ignara` command line: `serve` and `simulate`."""

from __future__ import annotations

import json
import sys

import click

from gateway.settings import Settings


@click.group()
def main() -> None:
    """Ignara Gateway: admission control for shared AI compute."""


@main.command()
@click.option("--host", default=None, help="Address to bind (default: IGNARA_HOST or 127.0.0.1).")
@click.option("--port", default=None, type=int, help="Port (default: IGNARA_PORT or 8080).")
def serve(host: str | None, port: int | None) -> None:
    """Run the gateway on its embedded defaults."""
    import uvicorn

    from gateway.app import create_app

    settings = Settings.from_env()
    uvicorn.run(
        create_app(settings),
        host=host or settings.server.host,
        port=port or settings.server.port,
        log_level=settings.server.log_level,
    )


@main.command()
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the snapshots as one JSON object.")
def simulate(file: str, as_json: bool) -> None:
    """Play an admission scenario; exit 0 if every expect held, 1 if not, 2 if invalid."""
    from quota.scenario import ScenarioError, load_scenario
    from quota.simulate import play

    try:
        result = play(load_scenario(file))
    except ScenarioError as err:
        click.echo(f"invalid scenario {file}: {err}", err=True)
        sys.exit(2)
    if as_json:
        click.echo(json.dumps(result.to_json(), sort_keys=False))
    else:
        click.echo(result.describe())
    for failure in result.failures:
        click.echo(failure, err=True)
    sys.exit(0 if result.ok else 1)


if __name__ == "__main__":  # pragma: no cover
    main()

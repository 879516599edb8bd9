"""How the command line turns errors into messages and exit codes.

Bad input never shows a Python traceback (unless ``--debug``): the error says what and where in
one paragraph and the process exits with :data:`EXIT_USAGE`.
"""

from __future__ import annotations

import io
import sys

import click

from hankweave.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_SIGINT, EXIT_USAGE
from hankweave.secrets import mask_url_credentials


class CLIError(click.ClickException):
    """A user-facing error: printed as ``Error: <message>`` with its exit code."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        # click declares exit_code a class variable; each error here carries its own.
        self.exit_code = exit_code  # type: ignore[misc]


def run_cli(group: click.Group) -> int:
    """Run the click group; unexpected exceptions become one error line (tracebacks with --debug)."""
    debug = "--debug" in sys.argv[1:]
    try:
        # Without standalone mode click returns ctx.exit(n)'s code instead of raising it.
        code = group.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        return EXIT_SIGINT
    except click.ClickException as exc:
        # A message may quote a URL a library put in its own text: its password stays hidden.
        shown = io.StringIO()
        exc.show(file=shown)
        click.echo(mask_url_credentials(shown.getvalue()), err=True, nl=False)
        return exc.exit_code
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        return EXIT_SIGINT
    except Exception as exc:
        if debug:
            raise
        click.echo(mask_url_credentials(f"Error: {type(exc).__name__}: {exc} (run with --debug"
                                        " for details)"), err=True)
        return EXIT_FAILED
    return code if isinstance(code, int) else EXIT_OK

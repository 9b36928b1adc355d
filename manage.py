#!/usr/bin/env python
"""Django's command line, on the services this checkout's stack runs (ticketing/devstack.py).

An operator's command that cannot reach Redis or Postgres says so in one line,
with the address it tried and how to point it elsewhere, and exits non-zero;
`--traceback` shows the whole story.
"""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "ticketing.settings")
    os.environ.setdefault("DB_POOL", "false")
    from ticketing import devstack, servers

    command = sys.argv[1] if len(sys.argv) > 1 else "help"
    try:
        with devstack.for_command(command) as started:
            from django.core.exceptions import ImproperlyConfigured
            from django.core.management import call_command, execute_from_command_line

            try:
                if started and command != "migrate":
                    # Servers of its own, perhaps on a new database: `init_event`
                    # before the first `make run` finds the tables it needs.
                    import django

                    django.setup()
                    call_command("migrate", "--noinput", verbosity=0)
                execute_from_command_line(sys.argv)
            except ImproperlyConfigured as exc:
                sys.exit(f"Configuration error: {exc}")
            except Exception as exc:
                from ticketing.unreachable import explain

                line = explain(exc)
                if line is None or "--traceback" in sys.argv:
                    raise
                sys.exit(f"error: {line}")
    except servers.ServerError as exc:
        sys.exit(f"error: {exc}")


if __name__ == "__main__":
    main()

"""User-facing errors: printed as one line, exit code 2, never a traceback."""


class ConfigError(Exception):
    """A bad setting or input that the user can fix; the message names the key."""


def require(condition: bool, key: str, message: str) -> None:
    """Raise ConfigError('key: message') unless condition holds."""
    if not condition:
        raise ConfigError(f"{key}: {message}")


def run_command(main, argv: list[str]):
    """Return a command's `main(argv)`; a ConfigError becomes one line on stderr and exit 2."""
    import sys

    try:
        return main(argv)
    except ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)

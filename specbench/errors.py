"""User-facing errors: printed as one line, exit code 2, never a traceback."""


class ConfigError(Exception):
    """A bad setting or input that the user can fix; the message names the key."""


def require(condition: bool, key: str, message: str) -> None:
    """Raise ConfigError('key: message') unless condition holds."""
    if not condition:
        raise ConfigError(f"{key}: {message}")

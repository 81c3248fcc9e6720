"""The one exception type the command-line tools turn into a one-line message and exit code 2."""


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of an error's message (its type's name where it has none), cut to `limit`."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:limit]


class UserError(Exception):
    """An error the user caused and can fix (a config key, a path, a full disk): printed as one line."""


class ConfigError(UserError):
    """A config key with a wrong value, type or path; the message names the key."""

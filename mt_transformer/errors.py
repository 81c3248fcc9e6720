"""The one exception type the command-line tools turn into a one-line message and exit code 2."""


class UserError(Exception):
    """An error the user caused and can fix (a config key, a path, a full disk): printed as one line."""


class ConfigError(UserError):
    """A config key with a wrong value, type or path; the message names the key."""

"""Errors the CLI turns into one-line messages (never a traceback)."""


class SattribError(Exception):
    """An expected failure; str(error) is the one line the user sees."""


class InputError(SattribError):
    """Unusable input: a missing path, an unreadable file, an invalid job.json."""


class RuleError(SattribError):
    """A rule file that cannot be loaded; the message lists every problem, one per line."""

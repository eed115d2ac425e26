"""Where the bundled rule and template folders are, installed or in a checkout."""

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def bundled_dir(name: str) -> Path:
    """The shipped `rules` or `templates` folder: inside the wheel, else the checkout's top level."""
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    return _PACKAGE.parent / name

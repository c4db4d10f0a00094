"""How to install an optional extra, worded for both kinds of install (from PyPI or from a checkout)."""


def install_hint(extra: str) -> str:
    """``'the "viz" extra: pip install "diffchain[viz]" (from a checkout: pip install -e ".[viz]")'``."""
    return f'the "{extra}" extra: pip install "diffchain[{extra}]" (from a checkout: pip install -e ".[{extra}]")'

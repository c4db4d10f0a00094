"""MkDocs hook: tolerate link-like brackets inside the package's docstrings.

Docstrings write block matrices as ``[[M, J^T], [J, 0]] [a; -lambda]``, which Markdown reads as a reference link
``[text][ref]`` that mkdocs-autorefs cannot resolve. Such warnings are dropped when they come from a docstring of the
package (their context names a file under ``diffchain/``); an unresolved reference written in a docs page still fails
``mkdocs build --strict``.
"""
import logging


class _DocstringBrackets(logging.Filter):
    def filter(self, record):
        message = record.getMessage()
        return not ("Could not find cross-reference target" in message and "/diffchain/" in message)


def on_startup(command, dirty):
    # the plugin logs under its module's name (mkdocs-autorefs 1.x), older versions under the package's
    for name in ("mkdocs.plugins.mkdocs_autorefs._internal.plugin", "mkdocs.plugins.mkdocs_autorefs.plugin",
                 "mkdocs.plugins.mkdocs_autorefs"):
        logging.getLogger(name).addFilter(_DocstringBrackets())

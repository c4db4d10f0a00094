"""The API reference's cross-references: Sphinx roles made links, public paths only, and a check of the built page.

This file is loaded twice by the docs build:

* as a **griffe extension** (``mkdocs.yml``: the mkdocstrings handler's ``extensions``). Once griffe has loaded the
  package, every docstring's Sphinx roles (``:class:`~diffchain.Model```, ``:func:`rollout```, ``:meth:``,
  ``:mod:``, ``:attr:``, with ``~`` shortening and ``title <target>``) are rewritten to mkdocs-autorefs
  cross-references in Markdown (``[`Model`][diffchain.Model]``). A target is resolved as Sphinx does (the object's
  own scope, then its module's, then the package's) and written with its **public** name: the name under which
  ``diffchain`` or one of its public submodules (``systems``, ``envs``, ``viz``) exports it, so
  ``diffchain._simulate.rollout.rollout`` becomes ``diffchain.rollout``. A target with no public name, or one that
  the reference does not show (no docstring), is written as code text, never as a broken link.
  Every entry of a public name then ends with a line ``Guide: ...`` linking to the guide pages that use it (or its
  group's page, :data:`GROUP_PAGES`); a public name with no guide page is a warning, so ``--strict`` fails.
* as an **MkDocs hook** (``mkdocs.yml``: ``hooks``). It keeps tolerating link-like brackets in docstrings (block
  matrices such as ``[[M, J^T], [J, 0]] [a; -lambda]``, which Markdown reads as reference links), and checks the
  built API page: a raw Sphinx role, a private module path (``diffchain._...``) or an unresolved cross-reference left
  in it fails the build (:func:`check_html`, a pure function the tests call).
"""
import html as _html
import logging
import pathlib
import re

_log = logging.getLogger("mkdocs.hooks.docstring_refs")

# --------------------------------------------------------------------------------------------------------------
# Sphinx roles -> autorefs cross-references (pure: the tests call rewrite_roles with their own resolver)

ROLE = re.compile(r":(?:py:)?(?P<role>class|func|meth|mod|attr|data|obj|exc|const):`(?P<body>[^`]+)`")
TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$")


def _private(path):
    return any(part.startswith("_") and not part.startswith("__") for part in path.split("."))


def rewrite_roles(text, resolve):
    """``text`` with each Sphinx role replaced by Markdown: ``[`shown`][public.path]`` where ``resolve(target)`` gives
    the public path of a shown object, else `` `shown` ``. ``shown`` is the role's explicit title, else the target's
    last component with ``~`` (or when the target is a private path), else the target as written (its public path if
    it was written as a private one)."""
    def one(match):
        body = match.group("body").strip()
        titled = TITLED.match(body)
        title, target = (titled.group("title"), titled.group("target")) if titled else (None, body)
        short = target.startswith("~")
        target = target.lstrip("~!")
        public = None if match.group("body").lstrip().startswith("!") else resolve(target)
        if title:
            shown = title
        elif short:
            shown = target.rsplit(".", 1)[-1]
        elif _private(target):
            shown = public if public else target.rsplit(".", 1)[-1]
        else:
            shown = target
        return f"[`{shown}`][{public}]" if public else f"`{shown}`"

    return ROLE.sub(one, text)


# --------------------------------------------------------------------------------------------------------------
# the built page's check (pure)

# any role, :func: as well as one the rewrite does not know (:ref:, :py:data:, :math:): Markdown shows them raw
RAW_ROLE = re.compile(r"(?<![\w:]):(?:[a-z]+:)?[a-z]+:(?:<code>|`)")
PRIVATE_PATH = re.compile(r"diffchain\._(?!_)\w*(?:\.\w+)*")
UNRESOLVED = re.compile(r"\]\[(?:<code>)?[\w.:()-]+(?:</code>)?\]")


def check_html(text):
    """The problems of a built API page: each a line naming what is left and a little of its context. Empty when the
    page shows no raw Sphinx role, no private module path ``diffchain._...`` (in its text or its attributes) and no
    unresolved cross-reference ``[title][diffchain.x]`` or ``[title][heading-anchor]``."""
    problems = []
    for kind, pattern in (("raw Sphinx role", RAW_ROLE), ("private module path", PRIVATE_PATH),
                          ("unresolved cross-reference", UNRESOLVED)):
        for match in pattern.finditer(text):
            context = re.sub(r"<[^>]+>", "", text[max(0, match.start() - 80):match.end() + 60])
            context = " ".join(_html.unescape(context).split())
            problems.append(f"{kind} {match.group(0)!r} in: ...{context}...")
    return problems


# --------------------------------------------------------------------------------------------------------------
# every public name links to the guide pages that use it (pure but for reading docs/)

DOCS = pathlib.Path(__file__).resolve().parents[1]
# the pages a name's entry may link to, in the order of the site's navigation (the reference, home page, physics and
# development pages are not guides)
GUIDE_PAGES = ("getting-started.md", "guide/chains.md", "guide/mechanisms.md", "guide/flexible.md", "guide/events.md",
               "guide/gradients.md", "guide/batching.md", "guide/sensitivities.md", "guide/linearization.md",
               "guide/sysid.md", "guide/systems.md", "guide/files.md", "examples.md", "performance.md")
# a name that no guide page uses links to its group's page (the groups of diffchain.__all__: a title's first words)
# or its submodule's; a public name that has neither fails the build
GROUP_PAGES = {"The model": "guide/chains.md", "Forward dynamics": "guide/chains.md",
               "Integration": "guide/chains.md", "Batching": "guide/batching.md",
               "Closed loops": "guide/mechanisms.md", "Contacts": "guide/events.md",
               "Whether a run": "getting-started.md", "Linearisations": "guide/linearization.md",
               "Files": "guide/files.md", "Measured trajectories": "guide/sysid.md",
               "Bad input": "getting-started.md", "Opt-in": "performance.md"}
MODULE_PAGES = {"diffchain.systems": "guide/systems.md", "diffchain.envs": "guide/systems.md",
                "diffchain.viz": "examples.md"}
MOST_LINKS = 3


def page_titles(docs=DOCS):
    """{page: (title, anchor)}: each guide page's first heading and its anchor (as the toc extension makes it)."""
    from markdown.extensions.toc import slugify

    out = {}
    for page in GUIDE_PAGES:
        title = re.search(r"^# (.+)$", (docs / page).read_text(), re.M).group(1).strip()
        out[page] = (title, slugify(title, "-"))
    return out


def guide_pages(public_names, groups=(), docs=DOCS):
    """{public path: [page, ...]}: for each public path (``diffchain.rollout``, ``diffchain.systems.cartpole``), the
    guide pages that use it (``dc.rollout``, ``systems.cartpole``, ``from diffchain.systems import cartpole``), in the
    site's order, at most MOST_LINKS; else its group's page (``groups``: [(title, names)] of diffchain.__all__) or
    its submodule's; else no entry."""
    texts = {page: (docs / page).read_text() for page in GUIDE_PAGES}
    group_of = {f"diffchain.{n}": title for title, names in groups for n in names}
    out = {}
    for path in public_names:
        module, name = path.rsplit(".", 1)
        sub = module.rsplit(".", 1)[-1]
        if module == "diffchain":
            used = rf"\b(?:dc|diffchain)\.{name}\b"
        else:
            used = (rf"\b(?:{sub}|{re.escape(module)})\.{name}\b|"
                    rf"^\s*from {re.escape(module)} import [^\n]*\b{name}\b")
        pages = [page for page, text in texts.items() if re.search(used, text, re.M)][:MOST_LINKS]
        if not pages:
            title = group_of.get(path, "")
            pages = [page for start, page in GROUP_PAGES.items() if title.startswith(start)][:1]
        if not pages and (path in MODULE_PAGES or module in MODULE_PAGES):
            pages = [MODULE_PAGES.get(path) or MODULE_PAGES[module]]
        if pages:
            out[path] = pages
    return out


def guide_line(pages, titles):
    """The line appended to an entry's docstring: autorefs links to the pages' first headings."""
    return "Guide: " + ", ".join(f"[{titles[p][0]}][{titles[p][1]}]" for p in pages) + "."


# --------------------------------------------------------------------------------------------------------------
# the griffe extension

PUBLIC_MODULES = ("diffchain", "diffchain.systems", "diffchain.envs", "diffchain.viz")

try:
    import griffe
except ImportError:  # the hook alone (or the tests of the pure functions) need no griffe
    griffe = None


def _final_path(obj):
    try:
        return obj.final_target.path if obj.is_alias else obj.path
    except Exception:  # an alias to another package (jax, numpy...) or one that cannot be resolved
        return None


def _api_groups():
    import importlib.util

    spec = importlib.util.spec_from_file_location("api_groups", DOCS / "_hooks" / "api_groups.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.groups()


if griffe is not None:
    class PublicReferences(griffe.Extension):
        """Rewrites every docstring's Sphinx roles of the package, once it is loaded, to public cross-references."""

        def on_package(self, *, pkg, loader, **kwargs):
            if pkg.path != "diffchain":
                return
            collection = loader.modules_collection
            public = {}  # canonical (final) path -> public path
            for module_path in PUBLIC_MODULES:
                try:
                    module = collection[module_path]
                except Exception:
                    continue
                public.setdefault(module.path, module.path)
                # its __all__, else (diffchain.viz) what it defines and does not import
                names = module.exports if module.exports is not None else [
                    n for n, m in module.members.items() if not n.startswith("_") and not m.is_alias]
                for name in names:
                    name = name if isinstance(name, str) else getattr(name, "name", str(name))
                    member = module.members.get(name)
                    final = member is not None and _final_path(member)
                    if final:
                        public.setdefault(final, f"{module_path}.{name}")
            shown = {f"diffchain.{n}" for n in (collection["diffchain"].exports or ())}

            def to_public(obj):
                final = _final_path(obj)
                if final is None:
                    return None
                prefix = max((p for p in public if final == p or final.startswith(p + ".")), key=len, default=None)
                if prefix is None:
                    return None
                path = public[prefix] + final[len(prefix):]
                try:
                    target = obj.final_target if obj.is_alias else obj
                except Exception:
                    return None
                rendered = path in shown or (target.docstring is not None and target.docstring.value.strip()
                                             and not _private(path))
                return path if rendered else None

            def resolver(obj):
                def resolve(target):
                    first, _, rest = target.partition(".")
                    candidates = []
                    scope = obj if (obj.is_class or obj.is_module) else obj.parent
                    while scope is not None:
                        if first in scope.members:
                            candidates.append(scope.members[first].path + (f".{rest}" if rest else ""))
                            break
                        scope = scope.parent
                    candidates += [target, f"diffchain.{target}"]
                    for candidate in candidates:
                        try:
                            found = collection[candidate]
                        except Exception:
                            continue
                        result = to_public(found)
                        break
                    else:
                        result = None
                    _log.debug("%s: %s -> %s", obj.path, target, result or "code text")
                    return result
                return resolve

            def walk(obj):
                if obj.docstring is not None and ":" in obj.docstring.value:
                    obj.docstring.value = rewrite_roles(obj.docstring.value, resolver(obj))
                for member in obj.members.values():
                    if not member.is_alias:
                        walk(member)

            walk(pkg)

            # every entry of the reference (a public name with a docstring) ends with its guide pages
            entries = {}
            for path in sorted(set(public.values()), key=list(public.values()).index):
                if path == "diffchain":
                    continue
                try:
                    target = collection[path]
                    target = target.final_target if target.is_alias else target
                except Exception:
                    continue
                if target.docstring is not None and target.docstring.value.strip():
                    entries[path] = target
            groups = _api_groups()
            pages = guide_pages(list(entries), groups)
            titles = page_titles()
            done = set()
            for path, target in entries.items():
                if path not in pages:
                    _log.warning("docs/_hooks/docstring_refs.py: %s has no guide page (GROUP_PAGES, MODULE_PAGES)",
                                 path)
                elif id(target) not in done:
                    done.add(id(target))
                    target.docstring.value = target.docstring.value.rstrip() + "\n\n" + guide_line(pages[path], titles)


# --------------------------------------------------------------------------------------------------------------
# the MkDocs hook

class _DocstringBrackets(logging.Filter):
    def filter(self, record):
        message = record.getMessage()
        return not ("Could not find cross-reference target" in message and "/diffchain/" in message)


def on_startup(command, dirty):
    # the plugin logs under its module's name (mkdocs-autorefs 1.x), older versions under the package's
    for name in ("mkdocs.plugins.mkdocs_autorefs._internal.plugin", "mkdocs.plugins.mkdocs_autorefs.plugin",
                 "mkdocs.plugins.mkdocs_autorefs"):
        logging.getLogger(name).addFilter(_DocstringBrackets())


# mkdocstrings names an object in a link's (or an unlinked name's) tooltip by its canonical path, here a private one
# (``Solver (diffchain._solvers.base.Solver)``): such tooltips are dropped; the link itself goes to the public entry
PRIVATE_TITLE = re.compile(r'\s+title="[^"]*diffchain\._(?!_)[^"]*"')


def on_post_page(output, page, config):
    """On a page rendered by mkdocstrings (the API reference): drops the tooltips that name a private path, then
    fails the build on anything :func:`check_html` finds."""
    if 'class="doc doc-' not in output:
        return output
    output = PRIVATE_TITLE.sub("", output)
    problems = check_html(output)
    if problems:
        from mkdocs.exceptions import PluginError

        shown = "\n  ".join(problems[:40]) + (f"\n  ... and {len(problems) - 40} more" if len(problems) > 40 else "")
        raise PluginError(f"docs/_hooks/docstring_refs.py: {page.file.src_uri} shows {len(problems)} "
                          f"problem(s):\n  {shown}")
    return output

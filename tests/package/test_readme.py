"""The README and the documentation pages (docs/, built by mkdocs) are tested as code: every ```python block runs, in
order, one namespace per file; every ``dc.<name>`` they use is public; the API reference lists ``diffchain.__all__``;
the site builds with ``mkdocs build --strict``."""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))  # the documentation: every page


def _blocks(path):
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def _run_blocks(path):
    namespace = {}
    environ = dict(os.environ)
    try:
        for block in _blocks(path):
            exec(compile(block, str(path.relative_to(ROOT)), "exec"), namespace)
    finally:  # a page may opt in to XLA flags (dc.set_xla_cpu_flags): keep them out of later tests' subprocesses
        os.environ.clear()
        os.environ.update(environ)


@pytest.mark.slow
def test_readme_examples_run():
    assert len(_blocks(ROOT / "README.md")) >= 5
    _run_blocks(ROOT / "README.md")


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p)], ids=lambda p: p.relative_to(DOCS).as_posix())
def test_docs_examples_run(page):
    _run_blocks(page)


def _submodule(name):
    """Whether ``diffchain.<name>`` is a submodule (imported or not: ``import diffchain`` does not import them all)."""
    return importlib.util.find_spec(f"diffchain.{name}") is not None


def test_public_api_is_what_the_readme_uses():
    """``diffchain.__all__`` names the public API: each name exists, and each ``dc.<name>`` of the README and of the
    documentation pages (where the source tree has them: the sdist carries the README alone) that is not a submodule
    is one of them."""

    import diffchain as dc

    assert [n for n in dc.__all__ if not hasattr(dc, n)] == []
    for path in [ROOT / "README.md", *PAGES]:
        used = set(re.findall(r"\bdc\.(\w+)", path.read_text()))
        assert path.name != "README.md" or used, "the README uses no dc.<name>"
        assert sorted(n for n in used if not _submodule(n) and n not in dc.__all__ and n != "__all__") == [], \
            path.relative_to(ROOT).as_posix()


def test_readme_is_a_short_guide():
    """The README stays a front page: short, no development diary, no internals of the package (private names,
    module files, functions reached through an internal module), and its links lead somewhere."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    assert not re.search(r"\bsession \d|benchmark-notes|[✓✗]", text, re.I)
    assert re.findall(r"`[^`]*\b_[a-z][^`]*`", text) == []
    internal = {p.stem for p in (ROOT / "diffchain").glob("*.py")} - {"__init__", "__main__", "systems", "envs", "viz"}
    assert [m for m in re.findall(r"\b(\w+)\.(?!md\b|png\b)\w", text) if m in internal] == []
    assert "python -m diffchain demo" in text and "python -m pytest" in text
    if (DOCS / "index.md").exists():  # the sdist carries the pictures but not the pages
        for target in re.findall(r"\]\(([^)#\s]+)", text):
            if "://" not in target:
                assert (ROOT / target).exists(), target


def test_api_reference_lists_diffchain_all_in_its_groups():
    """docs/api.md is generated from ``diffchain.__all__`` when the site is built (docs/_hooks/api_groups.py): one
    ``::: diffchain`` block per group of ``__all__`` (the groups its comments make), together exactly ``__all__``."""
    hook = DOCS / "_hooks" / "api_groups.py"
    if not hook.exists():
        pytest.skip("docs/ is not in this tree (the sdist carries no docs pages)")
    import diffchain as dc

    spec = importlib.util.spec_from_file_location("api_groups", hook)
    api_groups = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(api_groups)
    groups = api_groups.groups()
    assert len(groups) > 1 and all(title and names for title, names in groups)
    assert [n for _, names in groups for n in names] == list(dc.__all__)
    assert api_groups.MARKER in (DOCS / "api.md").read_text()
    text = api_groups.markdown()
    assert text.count("::: diffchain\n") == len(groups) and all(f"        - {n}\n" in text for n in dc.__all__)


def test_docs_build_strict(tmp_path):
    """``mkdocs build --strict`` (warnings are errors: broken links, unknown references, API entries that cannot be
    rendered) builds the site, and the API page shows every name of ``diffchain.__all__``."""
    if not (ROOT / "mkdocs.yml").exists():
        pytest.skip("mkdocs.yml is not in this tree (the sdist carries no docs pages)")
    missing = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers")
               if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"the docs tools are not installed ({', '.join(missing)}): pip install -e \".[docs]\"")
    import diffchain as dc

    site = tmp_path / "site"
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(site)], capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    api = (site / "api" / "index.html").read_text()
    assert [n for n in dc.__all__ if f'id="diffchain.{n}"' not in api] == []


@pytest.mark.slow
def test_quick_start_commands_write_their_pictures(tmp_path):
    """The README's main job (``python -m diffchain demo``) and the events demo, shortened, in fresh processes as a
    newcomer runs them: each writes a PNG and says where, and shows its progress (a tqdm bar on standard error)."""
    import matplotlib.image

    for cmd, arg in (("demo", ["--seconds", "0.2"]), ("events", ["--steps", "100"])):
        out = tmp_path / f"{cmd}.png"
        run = subprocess.run([sys.executable, "-m", "diffchain", cmd, "--out", str(out), *arg], capture_output=True,
                             text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        assert str(out) in run.stdout
        steps = 200 if cmd == "demo" else 100  # (0.2 s at the demo's 1 ms)
        assert f"{steps}/{steps}" in run.stderr, run.stderr[-2000:]
        image = matplotlib.image.imread(out)
        assert image.ndim == 3 and min(image.shape[:2]) > 200 and image.std() > 0.01

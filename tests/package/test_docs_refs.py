"""The API reference's cross-references (docs/_hooks/docstring_refs.py): Sphinx roles rewritten to links with public
names, and the check that fails the docs build on a raw role or a private path. The pure functions are called here
directly; the full strict build is ``test_readme.py::test_docs_build_strict``."""
import importlib.util
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HOOK = ROOT / "docs" / "_hooks" / "docstring_refs.py"
pytestmark = pytest.mark.skipif(not HOOK.exists(), reason="docs/ is not in this tree (the sdist carries no docs)")


@pytest.fixture(scope="module")
def refs():
    spec = importlib.util.spec_from_file_location("docstring_refs", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PUBLIC = {"Model": "diffchain.Model", "diffchain._model.model.Model": "diffchain.Model", "rollout": "diffchain.rollout",
          "diffchain._simulate.rollout.rollout": "diffchain.rollout", "Model.energy": "diffchain.Model.energy"}


def test_roles_become_links_with_public_names_or_code(refs):
    resolve = PUBLIC.get
    cases = {
        ":class:`~diffchain._model.model.Model`": "[`Model`][diffchain.Model]",
        ":class:`diffchain._model.model.Model`": "[`diffchain.Model`][diffchain.Model]",
        ":func:`rollout`": "[`rollout`][diffchain.rollout]",
        ":py:func:`rollout`": "[`rollout`][diffchain.rollout]",
        ":meth:`Model.energy`": "[`Model.energy`][diffchain.Model.energy]",
        ":func:`the run <diffchain._simulate.rollout.rollout>`": "[`the run`][diffchain.rollout]",
        ":func:`!rollout`": "`rollout`",
        # no public name: code text, a private path shortened to its last component
        ":mod:`diffchain._analysis.diagnosis`": "`diagnosis`",
        ":func:`~diffchain._model.checks.runtime_checks`": "`runtime_checks`",
        ":attr:`point_kinds`": "`point_kinds`",
        ":func:`jax.jit`": "`jax.jit`",
    }
    for role, markdown in cases.items():
        assert refs.rewrite_roles(f"see {role}, then", resolve) == f"see {markdown}, then", role
    text = "A (:class:`~diffchain.Model`, :func:`rollout`)\n:attr:`x`."
    assert refs.ROLE.search(refs.rewrite_roles(text, resolve)) is None


def test_check_finds_raw_roles_private_paths_and_unresolved_references(refs):
    clean = ('<div class="doc doc-object"><p>Simulate a <a class="autorefs autorefs-internal" href="#diffchain.Model">'
             "<code>Model</code></a>; <code>diffchain.__all__</code>: see: <code>x</code>, Bases: <code>y</code></p>")
    assert refs.check_html(clean) == []
    planted = {":func:<code>rollout</code>": "raw Sphinx role", ":ref:`guide`": "raw Sphinx role",
               "<code>diffchain._simulate.rollout.rollout</code>": "private module path",
               '<span title="diffchain._solvers.dense.DenseSolver">DenseSolver</span>': "private module path",
               "[<code>energy</code>][diffchain.Model.energy]": "unresolved cross-reference"}
    for html, kind in planted.items():
        problems = refs.check_html(clean.replace("<p>", f"<p>{html} ", 1))
        assert len(problems) == 1 and problems[0].startswith(kind), (html, problems)


def test_the_hook_fails_a_page_with_a_raw_role_and_drops_private_tooltips(refs):
    PluginError = pytest.importorskip("mkdocs.exceptions").PluginError

    class Page:
        class file:
            src_uri = "api.md"

    link = '<a class="autorefs autorefs-internal" title="Solver (diffchain._solvers.base.Solver)" href="#diffchain.Solver">'
    page = f'<div class="doc doc-object"><p>{link}<code>Solver</code></a></p></div>'
    assert refs.on_post_page(page, Page, None) == page.replace(' title="Solver (diffchain._solvers.base.Solver)"', "")
    with pytest.raises(PluginError, match="raw Sphinx role"):
        refs.on_post_page(page.replace("<p>", "<p>:class:<code>Model</code> "), Page, None)
    guide = "<p>:class:<code>Model</code> in diffchain._model</p>"  # a page without mkdocstrings output: not checked
    assert refs.on_post_page(guide, Page, None) == guide


def test_the_griffe_extension_rewrites_the_package_docstrings(refs):
    griffe = pytest.importorskip("griffe")
    pkg = griffe.load("diffchain", search_paths=[str(ROOT)], resolve_aliases=False,
                      extensions=griffe.load_extensions(str(HOOK)))
    rollout = pkg["_simulate.rollout.rollout"].docstring.value
    assert refs.ROLE.search(rollout) is None
    assert "[`Model`][diffchain.Model]" in rollout and "[`RATTLE`][diffchain.RATTLE]" in rollout
    assert "][diffchain._" not in rollout
    assert rollout.rstrip().splitlines()[-1].startswith("Guide: [Getting started][getting-started]")
    backend = pkg["_simulate.rollout.Backend"].docstring.value
    assert "[`rollout`][diffchain.rollout]" in backend and "][diffchain.PointMajor]" in backend


def test_every_public_name_links_to_guide_pages(refs):
    groups = [("Integration, sensitivities", ["rollout", "Integrator"]), ("Opt-in process settings", ["xla_cpu_flags"])]
    pages = refs.guide_pages(["diffchain.rollout", "diffchain.Integrator", "diffchain.systems.cartpole",
                              "diffchain.viz.animate", "diffchain.nowhere"], groups)
    assert "getting-started.md" in pages["diffchain.rollout"] and len(pages["diffchain.rollout"]) <= refs.MOST_LINKS
    assert pages["diffchain.Integrator"] == ["guide/chains.md"]          # used by no page: its group's
    assert pages["diffchain.systems.cartpole"][0] == "guide/systems.md"
    assert pages["diffchain.viz.animate"] == ["examples.md"]             # its submodule's
    assert "diffchain.nowhere" not in pages                               # neither: the build warns (strict: fails)
    titles = refs.page_titles()
    assert titles["guide/chains.md"] == ("Chains", "chains")
    assert refs.guide_line(["guide/chains.md"], titles) == "Guide: [Chains][chains]."


@pytest.mark.slow
def test_docs_build_fails_on_a_planted_raw_role(tmp_path):
    """The strict build of a copy of the docs whose API page carries a raw role fails, naming it."""
    if any(importlib.util.find_spec(m) is None for m in ("mkdocs", "material", "mkdocstrings")):
        pytest.skip("the docs tools are not installed")
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "diffchain").symlink_to(ROOT / "diffchain")
    api = tmp_path / "docs" / "api.md"
    api.write_text(api.read_text().replace("<!-- diffchain.__all__ -->", "See :func:`rollout`.\n\n<!-- diffchain.__all__ -->"))
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode != 0 and "raw Sphinx role" in run.stdout + run.stderr, run.stderr[-3000:]

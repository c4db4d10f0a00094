"""Packaging: the declared dependencies are what the code imports, and the sdist and wheel hold what they should.

The dependency tests read pyproject.toml and parse the sources with ``ast`` (a second, independent account of what the
code needs). The slow test builds the sdist and, from it, the wheel (isolated, as pip builds for users), lists their
files against the source tree, installs that wheel into a fresh venv and runs some of the sdist's own tests there,
against the installed copy.
"""
import ast
import json
import os
import pathlib
import re
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from xml.etree import ElementTree

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]
# The modules that draw (matplotlib: the `viz` extra); `import diffchain` imports none of them.
DRAWING = {"viz.py", "_events/demo.py", "__main__.py"}
BENCH = "_bench/"  # the benchmark suite of the command line: its peers are the `bench` extra
# distribution name -> the top-level module it provides. A dependency missing here fails the tests below with a
# KeyError: add it.
MODULE_OF = {"jax": "jax", "jaxlib": "jaxlib", "equinox": "equinox", "numpy": "numpy", "jaxtyping": "jaxtyping",
             "matplotlib": "matplotlib", "optax": "optax", "pytest": "pytest", "pytest-xdist": "xdist",
             "hypothesis": "hypothesis", "mujoco": "mujoco", "mujoco-mjx": "mujoco", "gymnasium": "gymnasium",
             "build": "build", "tomli": "tomli", "mkdocs-material": "material",
             "mkdocstrings": "mkdocstrings", "jax2d": "jax2d", "chex": "chex", "jupyterlab": "jupyterlab",
             "ipykernel": "ipykernel", "nbclient": "nbclient", "scipy": "scipy", "tqdm": "tqdm", "black": "black",
             "jsonschema": "jsonschema", "mypy": "mypy", "pylinkage": "pylinkage"}


def _project():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _modules(requirements, extras):
    """Top-level modules of a list of requirement strings; ``diffchain[x]`` stands for the extra x."""
    out = set()
    for req in requirements:
        name, extra = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?", req).groups()
        if name == "diffchain":
            for e in extra.split(","):
                out |= _modules(extras[e.strip()], extras)
        else:
            out.add(MODULE_OF[name.lower()])
    return out


def _catches_import_error(handler):
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(k is None or getattr(k, "id", None) in ("ImportError", "ModuleNotFoundError") for k in kinds)


def _code(path):
    """The Python code of a .py file or of a notebook's code cells."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return path.read_text()


def _imports(paths, local=()):
    """Third-party top-level modules imported anywhere in these files (module level or in functions), except the
    optional ones (inside a ``try`` whose handler catches ImportError), the standard library, diffchain and ``local``."""
    names = set()
    for path in paths:
        tree = ast.parse(_code(path), str(path))
        optional = {id(n) for t in ast.walk(tree) if isinstance(t, ast.Try) and any(map(_catches_import_error,
                                                                                         t.handlers))
                    for stmt in t.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if id(node) in optional:
                continue
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__", "diffchain"} - set(local)


def test_runtime_dependencies_are_what_the_library_imports():
    project = _project()
    library = [p for p in (ROOT / "diffchain").rglob("*.py")
               if p.relative_to(ROOT / "diffchain").as_posix() not in DRAWING
               and not p.relative_to(ROOT / "diffchain").as_posix().startswith(BENCH)]
    assert len(library) > 10
    # jaxlib: JAX's compiled half, which diffchain uses through jax (and whose version it reads to set XLA flags)
    assert _modules(project["dependencies"], project["optional-dependencies"]) == _imports(library) | {"jaxlib"}
    drawing = [ROOT / "diffchain" / name for name in DRAWING]
    assert (_imports(drawing) - _imports(library)
            == _modules(project["optional-dependencies"]["viz"], project["optional-dependencies"]) == {"matplotlib"})
    bench = sorted((ROOT / "diffchain" / BENCH).glob("*.py"))
    # the jax2d extra also holds chex, which Jax2D imports without declaring it
    extras = project["optional-dependencies"]
    assert _modules(extras["jax2d"], extras) == {"jax2d", "chex"}
    assert (_imports(bench) - _imports(library)
            == _modules(extras["bench"], extras) | _modules(extras["jax2d"], extras) - {"chex"} == {"mujoco", "jax2d"})


def test_extras_cover_what_tests_and_examples_import():
    project = _project()
    extras = project["optional-dependencies"]
    runtime = _modules(project["dependencies"], extras)
    tests = sorted((ROOT / "tests").rglob("*.py"))
    local = [p.stem for p in tests + sorted((ROOT / "benchmarks").glob("*.py"))]
    assert _imports(tests, local) - runtime - _modules(extras["test"], extras) == set()
    # the packaging test runs `python -m build`, which installs the build backend (setuptools) in an isolated
    # environment itself: the extra need not hold it
    assert {"matplotlib", "build"} <= _modules(extras["test"], extras)
    examples = sorted((ROOT / "examples").glob("*.py"))
    assert examples and _imports(examples) - runtime - _modules(extras["examples"], extras) == set()
    experiments = sorted((ROOT / "experiments").glob("*.py"))
    assert experiments and _imports(experiments) - runtime - _modules(extras["experiments"], extras) == set()
    benchmarks = sorted((ROOT / "benchmarks").glob("*.py"))
    imported = _imports(benchmarks, local=[p.stem for p in benchmarks])
    assert imported - runtime - _modules(extras["examples"], extras) - _modules(extras["bench"], extras) == set()
    assert "optax" in _modules(extras["examples"], extras)
    assert {"mkdocs-material", "mkdocstrings"} <= {re.match(r"[A-Za-z0-9_.-]+", r).group(0) for r in extras["docs"]}


def test_import_diffchain_leaves_matplotlib_and_optax_out():
    code = ("import sys, diffchain; print(sorted(m for m in ('matplotlib', 'optax', 'diffchain.viz', "
            "'diffchain._events.demo', 'diffchain.__main__') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


def test_without_matplotlib_viz_and_the_command_line_say_how_to_install_it():
    code = """if True:
        import sys
        sys.modules["matplotlib"] = None  # as if not installed: importing it raises ModuleNotFoundError
        try:
            import diffchain.viz
        except ImportError as e:
            print("viz:", e)
        from diffchain.__main__ import main
        print("cli:", main(["demo"]))
    """
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    # both installs named: from PyPI, and from a checkout (editable, as the README installs)
    hint = 'the "viz" extra: pip install "diffchain[viz]" (from a checkout: pip install -e ".[viz]")'
    assert f"viz: diffchain draws with matplotlib, which is not installed; install {hint}" in run.stdout
    assert "cli: 1" in run.stdout
    assert hint in run.stderr


def test_no_hint_names_a_single_install():
    """Every ``pip install`` of the package's messages and docstrings goes through the one hint that names both
    installs (a bare ``pip install "diffchain[x]"`` fails in a checkout that was never published)."""
    for path in (ROOT / "diffchain").rglob("*.py"):
        if path.name != "_extras.py":
            assert "pip install" not in path.read_text(), path


def test_version_is_pyprojects_installed_or_not():
    """``diffchain.__version__`` is pyproject.toml's version, from the installed metadata, and from pyproject.toml
    where no metadata is found (a checkout on sys.path that was never installed)."""
    import importlib.metadata

    import diffchain

    version = _project()["version"]
    assert diffchain.__version__ == version == importlib.metadata.version("diffchain")
    code = ("import importlib.metadata as m\n"
            "found = m.version\n"
            "def version(name):\n"
            "    if name == 'diffchain': raise m.PackageNotFoundError(name)\n"
            "    return found(name)\n"
            "m.version = version\n"
            "import diffchain; print(diffchain.__version__)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == version


def test_metadata_declares_typing_and_the_verified_pythons():
    """``Typing :: Typed`` with a py.typed marker in the package (and package data that ships it); the Python
    classifiers are the versions from requires-python's floor up to those the floors' comment verified; a notebook
    extra that holds what the quick-start notebook imports and Jupyter to run it."""
    project = _project()
    classifiers = project["classifiers"]
    assert "Typing :: Typed" in classifiers and (ROOT / "diffchain" / "py.typed").is_file()
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "py.typed" in setuptools["package-data"]["diffchain"]
    floor = re.fullmatch(r">=3\.(\d+)", project["requires-python"]).group(1)
    minors = sorted(int(c.rsplit(".", 1)[1]) for c in classifiers if re.fullmatch(r"Programming Language :: Python "
                                                                                  r":: 3\.\d+", c))
    assert minors[0] == int(floor) and minors == list(range(minors[0], minors[-1] + 1))
    assert not any(c.startswith("License ::") for c in classifiers)  # the SPDX expression says it (PEP 639)
    extras = project["optional-dependencies"]
    notebook = _modules(extras["notebook"], extras)
    runtime = _modules(project["dependencies"], extras)
    notebooks = sorted((ROOT / "notebooks").glob("*.ipynb")) + sorted((ROOT / "notebooks").glob("*.py"))
    assert len(notebooks) > 2 and _imports(notebooks, local=["build"]) - runtime - notebook == set()
    assert {"jupyterlab", "ipykernel", "nbclient"} <= notebook


def _run(cmd, **kwargs):
    run = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=600, **kwargs)
    assert run.returncode == 0, f"{cmd}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    return run


def _site_dirs():
    """The site-packages directories of the running environment, in the order of its sys.path: a venv's own (and its
    base interpreter's where the venv was made with --system-site-packages), the user's where enabled; the global
    interpreter's where the tests run in it."""
    dirs = site.getsitepackages() + [sysconfig.get_paths()[k] for k in ("purelib", "platlib")]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    dirs = {os.path.normcase(os.path.realpath(d)) for d in dirs if os.path.isdir(d)}
    return [p for p in dict.fromkeys(sys.path) if p and os.path.normcase(os.path.realpath(p)) in dirs]


@pytest.mark.slow
def test_sdist_and_wheel_hold_what_they_should_and_the_sdist_tests_pass_installed(tmp_path):
    """Builds the sdist from a copy of the source tree (the build writes egg-info and build/ next to its sources) and
    the wheel from that sdist, each in an isolated environment holding only pyproject.toml's build requirements (pip
    installs setuptools>=77 there, downloading it where it has no copy: nothing of this machine's own setuptools), as
    pip builds for users. Then installs that wheel into a fresh venv that sees this environment's packages and no
    others (no download of JAX; not the base interpreter's, which --system-site-packages would show) and runs a fast
    part of the sdist's own tests there, against the installed copy."""
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "*.egg-info", "build", "dist", "__pycache__",
                                                             ".pytest_cache", ".hypothesis", "out"))
    dist = tmp_path / "dist"
    build = _run([sys.executable, "-m", "build", "--outdir", dist, src])
    log = (build.stdout + build.stderr).lower()
    assert "deprecat" not in log  # e.g. the license as a TOML table
    # build's default: the sdist, then the wheel from the unpacked sdist, each in its own isolated environment
    assert "building wheel from sdist" in log and log.count("creating isolated environment") == 2, log[-3000:]
    (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")

    # the sdist: every test module (conftest.py and strategies.py included), picture, example (script or notebook),
    # benchmark script and report of the source tree, and the package
    with tarfile.open(sdist) as tar:
        in_sdist = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    want = {"LICENSE", "README.md", "pyproject.toml", "mkdocs.yml", "tests/conftest.py", "tests/strategies.py",
            "diffchain/_bench/peers.py", "notebooks/quickstart.ipynb", "notebooks/build.py"}
    for pattern in ("tests/**/*.py", "docs/*.png", "docs/**/*.md", "examples/*.py", "notebooks/*.ipynb", "notebooks/*.py",
                    "experiments/*.py", "experiments/README.md", "experiments/results/*", "benchmarks/*.py",
                    "benchmarks/results/*.md", "diffchain/**/*.py"):
        want |= {p.relative_to(ROOT).as_posix() for p in ROOT.glob(pattern)}
    assert any(n.startswith("docs/") for n in want)
    assert want - in_sdist == set()

    # the wheel: the package's modules, the licence and the metadata, nothing else
    with zipfile.ZipFile(wheel) as whl:
        in_wheel = set(whl.namelist())
        meta = whl.read(next(n for n in in_wheel if n.endswith(".dist-info/METADATA"))).decode()
    package = {p.relative_to(ROOT).as_posix() for p in (ROOT / "diffchain").rglob("*.py")} | {"diffchain/py.typed"}
    package |= {p.relative_to(ROOT).as_posix() for p in (ROOT / "diffchain").rglob("*.schema.json")}  # (the format's)
    assert "diffchain/_io/schema/model-v1.schema.json" in package
    assert "diffchain/__init__.py" in package
    assert {n for n in in_wheel if ".dist-info/" not in n} == package
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in in_wheel)
    assert not any(n.startswith("tests/") for n in in_wheel)
    assert "License-Expression: MIT" in meta.splitlines() and "License-File: LICENSE" in meta.splitlines()
    assert f"Version: {_project()['version']}" in meta.splitlines()
    assert {f"Classifier: {c}" for c in _project()["classifiers"]} <= set(meta.splitlines())
    assert "CHANGELOG.md" in in_sdist

    # a fresh venv on top of this environment's packages: a .pth file in its site-packages lists this environment's
    # site-packages directories, after the venv's own (plain paths: their .pth files, diffchain's editable install
    # among them, are not run). This environment's pip, seen through it, installs the wheel built from the sdist.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    assert pathlib.Path(purelib).is_relative_to(venv)
    dirs = _site_dirs()
    assert dirs and all(not pathlib.Path(d).is_relative_to(venv) for d in dirs)
    (pathlib.Path(purelib) / "running_environment.pth").write_text("".join(d + "\n" for d in dirs))
    seen = _run([python, "-c", "import sys; print('\\n'.join(sys.path))"]).stdout.splitlines()
    assert seen[seen.index(purelib):] == [purelib] + dirs, seen  # this environment's packages and nothing else's
    _run([python, "-m", "pip", "install", "--no-deps", "--no-index", "--no-cache-dir", "--ignore-installed", wheel])
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (tests,) = (tmp_path / "unpacked").glob("diffchain-*/tests")
    # from an empty directory, so that nothing but the installed copy can be imported; the first test files need
    # conftest.py, strategies.py, test_solvers_agree.py; the last reads the sdist's README
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    code = ("import sys, pytest; rc = pytest.main(sys.argv[1:]); import diffchain; "
            "print('DIFFCHAIN_FILE=' + diffchain.__file__); print('DIFFCHAIN_VERSION=' + diffchain.__version__); "
            "sys.exit(rc)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    report = tmp_path / "report.xml"
    run = _run([python, "-c", code, "-n", "0", "-p", "no:cacheprovider", f"--junitxml={report}",
                tests / "model" / "test_model.py", "-m", "not slow", "-k", "not host_callbacks and not dalpha_dtau",
                f"{tests / 'solvers' / 'test_links.py'}::test_compound_pendulum",
                f"{tests / 'package' / 'test_readme.py'}::test_public_api_is_what_the_readme_uses"],
               cwd=workdir, env=env)
    installed = pathlib.Path(re.search(r"DIFFCHAIN_FILE=(.*)", run.stdout).group(1).strip())
    assert installed.is_relative_to(venv) and installed.name == "__init__.py"
    assert (installed.parent / "py.typed").is_file()
    assert re.search(r"DIFFCHAIN_VERSION=(.*)", run.stdout).group(1).strip() == _project()["version"]
    counts = ElementTree.parse(report).getroot().find("testsuite").attrib
    assert int(counts["tests"]) >= 10, counts
    assert [counts[k] for k in ("failures", "errors", "skipped")] == ["0", "0", "0"], counts

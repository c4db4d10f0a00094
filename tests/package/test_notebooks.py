"""The notebooks (notebooks/): the quick tour runs, cell by cell, and says what it shows; each guide notebook is its
guide page (notebooks/build.py: the page's prose and examples as cells, in order), saved executed. The pages' code is
what tests/package/test_readme.py runs, so each notebook's code runs in the suite once."""
import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
pytestmark = pytest.mark.skipif(not (ROOT / "docs").exists(), reason="docs/ is not in this tree")


def _build():
    spec = importlib.util.spec_from_file_location("notebooks_build", NOTEBOOKS / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_guide_notebooks_are_their_pages_saved_executed():
    """notebooks/ holds the quick tour and one notebook per guide topic; each guide notebook's cells are its page's
    (prose, then each ```python block as a code cell), every code cell ran (in order) and a page that prints shows
    it; its links lead to files that exist."""
    build = _build()
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(["quickstart.ipynb"] +
                                                                         [f"{t}.ipynb" for t in build.TOPICS])
    for topic in build.TOPICS:
        nb = json.loads((NOTEBOOKS / f"{topic}.ipynb").read_text())
        got = [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]
        want = build.cells(topic)
        assert got == want, f"notebooks/{topic}.ipynb is not docs/guide/{topic}.md: run python notebooks/build.py"
        code = [c for c in nb["cells"] if c["cell_type"] == "code"]
        assert [c["execution_count"] for c in code] == list(range(1, len(code) + 1)), topic
        prints = "print(" in "".join(s for k, s in want if k == "code")
        assert not prints or any(c["outputs"] for c in code), f"{topic}: saved without its outputs"
        for kind, source in want:
            for target in build.LINK.findall(source):
                assert (NOTEBOOKS / target[1]).exists(), (topic, target[1])


@pytest.mark.slow
def test_quickstart_notebook_runs():
    """Every code cell of the notebook, in order, in one namespace (in this process): the two solvers agree, the
    simulation keeps its energy, the gradient and the batch are finite, and it draws its three figures."""
    import jax.numpy as jnp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = NOTEBOOKS / "quickstart.ipynb"
    plt.close("all")
    namespace = {}
    try:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                exec(compile("".join(cell["source"]), str(path), "exec"), namespace)
        assert len(plt.get_fignums()) == 3
    finally:
        plt.close("all")
    ns = namespace
    assert float(jnp.max(jnp.abs(ns["a_rec"] - ns["a_kkt"]))) < 1e-9
    energy0 = ns["dc"].energy(ns["arm"], ns["state"])
    assert float(jnp.max(jnp.abs(ns["E"] - energy0)) / jnp.abs(energy0)) < 1e-3
    assert bool(jnp.all(jnp.isfinite(ns["g"]))) and float(jnp.max(jnp.abs(ns["g"]))) > 0
    assert ns["tips"].shape == (1024, 2) and bool(jnp.all(jnp.isfinite(ns["tips"])))

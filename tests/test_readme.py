"""Every ```python block of the README runs, in order, in one namespace."""
import pathlib
import re


def test_readme_examples_run():
    text = (pathlib.Path(__file__).parent.parent / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 5
    namespace = {}
    for block in blocks:
        exec(compile(block, "README.md", "exec"), namespace)


def test_public_api_is_what_the_readme_uses():
    """``diffchain.__all__`` names the public API: each name exists, and each ``dc.<name>`` of the README that is
    not a submodule is one of them."""
    import types

    import diffchain as dc

    assert [n for n in dc.__all__ if not hasattr(dc, n)] == []
    used = set(re.findall(r"\bdc\.(\w+)", (pathlib.Path(__file__).parent.parent / "README.md").read_text()))
    assert used, "the README uses no dc.<name>"
    assert sorted(n for n in used if not isinstance(getattr(dc, n, None), types.ModuleType)
                  and n not in dc.__all__) == []


def test_notebook_code_cells_run():
    import json

    import matplotlib

    matplotlib.use("Agg")
    for path in sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb")):
        namespace = {}
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                exec(compile("".join(cell["source"]), str(path), "exec"), namespace)


def test_quick_start_commands_write_their_pictures(tmp_path):
    """The README's main job (``python -m diffchain demo``) and the events demo, shortened, in fresh processes as a
    newcomer runs them: each writes a PNG and says where."""
    import subprocess
    import sys

    import matplotlib.image

    for cmd, arg in (("demo", ["--seconds", "0.2"]), ("events", ["--steps", "100"])):
        out = tmp_path / f"{cmd}.png"
        run = subprocess.run([sys.executable, "-m", "diffchain", cmd, "--out", str(out), *arg], capture_output=True,
                             text=True, timeout=600)
        assert run.returncode == 0, run.stderr[-2000:]
        assert str(out) in run.stdout
        image = matplotlib.image.imread(out)
        assert image.ndim == 3 and min(image.shape[:2]) > 200 and image.std() > 0.01

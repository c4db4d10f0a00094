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


def test_notebook_code_cells_run():
    import json

    import matplotlib

    matplotlib.use("Agg")
    for path in sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb")):
        namespace = {}
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                exec(compile("".join(cell["source"]), str(path), "exec"), namespace)

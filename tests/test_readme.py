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

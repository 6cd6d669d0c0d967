"""Griffe extension of the API reference: docstring examples as code blocks.

Most docstrings of keras-trees hold doctests (``>>>`` lines, run by pytest's
``--doctest-modules``) without an ``Examples:`` section, which Markdown would
read as nested quotes (and ``x[0]`` as a link). This wraps every run of
``>>>``/``...`` lines and their output (up to a blank line) in a fenced
``pycon`` block before the docstring is parsed.
"""

import re

import griffe

_PROMPT = re.compile(r"^(\s*)>>>( |$)")


def fence_doctests(text):
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        match = _PROMPT.match(lines[i])
        if not match or (out and out[-1].strip().startswith("```")):
            out.append(lines[i])
            i += 1
            continue
        indent = match.group(1)
        block = []
        while i < len(lines) and lines[i].strip():
            block.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].strip())
            i += 1
        out += [f"{indent}```pycon", *[indent + line for line in block], f"{indent}```"]
    return "\n".join(out)


class DoctestBlocks(griffe.Extension):
    def on_object(self, *, obj, **kwargs):
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)

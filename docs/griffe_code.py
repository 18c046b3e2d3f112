"""A Griffe extension: the code in this project's docstrings rendered as code in the API pages.

The docstrings show code as Python's own docs do, by indentation: an `Example:` section, or a
block indented past its paragraph after a blank line. Markdown takes 2-space-indented lines for
a paragraph (and `x[..., names.site("foot")]` for a link), so before the docstrings are parsed
this extension fences those blocks. The Google sections that list items (Args, Returns,
Attributes, ...) keep their indentation, which is their structure; an Args item that names
several parameters ("lower, upper: ...") becomes one item per name, as Griffe expects.
"""

import re
from typing import Any

import griffe

# A Google section's title on a line of its own ("Args:", "Example:").
_SECTION = re.compile(r"^([A-Z][A-Za-z ]{1,30}):\s*$")
_EXAMPLE = {"Example", "Examples"}
_PARAMETERS = {"Args", "Arguments", "Parameters", "Params", "Other Parameters"}
# An item that documents several parameters at once: "lower, upper: the box".
_SHARED_ITEM = re.compile(r"^( +)([A-Za-z_]\w*(?:, *[A-Za-z_]\w*)+):(.*)$")


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip(" "))


def _top_level(line: str) -> bool:
  return bool(line.strip()) and _indent(line) == 0


def _section_after(line: str, section: str | None) -> str | None:
  """The Google section the docstring is in after line: a top-level line starts one (a title)
  or ends it (None: prose); indented and blank lines stay in it."""
  if not _top_level(line):
    return section
  title = _SECTION.match(line)
  return title.group(1) if title else None


def _fence(block: list[str], base: int) -> list[str]:
  """block (indented lines, blank ones inside) as a fenced Python block at indent base."""
  while block and not block[-1].strip():
    block = block[:-1]
  cut = min(_indent(line) for line in block if line.strip())
  pad = " " * base
  body = [pad + line[cut:] if line.strip() else "" for line in block]
  return [pad + "```python", *body, pad + "```"]


def split_shared_items(text: str) -> str:
  """text with each Args item that names several parameters ("a, b: ...") written once per
  name, so that Griffe checks each name against the signature and lists each one."""
  lines = text.splitlines()
  out: list[str] = []
  section = None
  i = 0
  while i < len(lines):
    line = lines[i]
    section = _section_after(line, section)
    item = _SHARED_ITEM.match(line) if section in _PARAMETERS else None
    if item is None:
      out.append(line)
      i += 1
      continue
    indent, names, first = item.groups()
    end = i + 1
    while end < len(lines) and lines[end].strip() and _indent(lines[end]) > len(indent):
      end += 1
    for name in names.split(","):
      out += [f"{indent}{name.strip()}:{first}", *lines[i + 1:end]]
    i = end
  return "\n".join(out)


def fence_code(text: str) -> str:
  """text, a cleaned docstring, with its indented code blocks fenced for Markdown."""
  lines = text.splitlines()
  out: list[str] = []
  section = None  # the title of the Google section the line is in, or None at the top level
  i = 0
  while i < len(lines):
    line = lines[i]
    section = _section_after(line, section)
    if _top_level(line):
      out.append(line)
      i += 1
      continue
    after_blank = bool(out) and not out[-1].strip()
    after_title = bool(out) and _SECTION.match(out[-1]) is not None
    starts_block = bool(line.strip()) and (
      (section in _EXAMPLE and (after_blank or after_title)) or (section is None and after_blank))
    if not starts_block:
      out.append(line)
      i += 1
      continue
    # The block: the following lines indented at least as far, with blank lines inside it.
    indent = _indent(line)
    end = i
    while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) >= indent):
      end += 1
    base = 2 if section in _EXAMPLE else 0
    if after_title:
      out.append("")
    out += _fence(lines[i:end], base)
    if end < len(lines):
      out.append("")
    i = end
  return "\n".join(out)


class FenceCode(griffe.Extension):
  """Fences the indented code of every docstring Griffe loads, before it is parsed."""

  def on_instance(self, *, node: Any, obj: griffe.Object, agent: Any, **kwargs: Any) -> None:
    """Rewrites obj's docstring (node and agent are Griffe's, unused here)."""
    del node, agent, kwargs
    if obj.docstring is not None:
      obj.docstring.value = fence_code(split_shared_items(obj.docstring.value))

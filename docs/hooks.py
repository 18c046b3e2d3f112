"""MkDocs hook: the images that the pages show from outside docs/, copied into the site.

The guides and the gallery link the examples' and benchmarks' plots and GIFs where they live in
the repository (`../examples/results/g1_jump.gif` from a page in docs/), so that the pages also
read on a forge and git keeps one copy of each image. MkDocs serves only files under docs_dir:
this hook finds those links when the files are collected, adds each linked image to the site
under `_repo/<its path in the repository>`, and rewrites the page's link to it. A link to a file
outside docs/ that is no image of the allowed folders is left alone, and MkDocs' own link check
reports it.
"""

import os
import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

# The repository's folders whose images the pages may show, and the kinds of files copied.
ALLOWED = ("examples/results/", "benchmarks/results/")
IMAGES = (".gif", ".png", ".jpg", ".jpeg", ".svg", ".webp")
SITE_FOLDER = "_repo"

# Markdown links and images, and HTML src= / href= attributes.
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:src|href)=\"([^\"]+)\"")

# Per page (its src_uri): the links to rewrite, original -> the URL of the copy.
_REWRITES: dict[str, dict[str, str]] = {}


def _external_image(page_uri: str, target: str, docs: Path, root: Path) -> str | None:
  """The repository path of the allowed image that target names from page_uri, or None."""
  if "://" in target or target.startswith(("#", "/", "mailto:")):
    return None
  path = target.split("#", 1)[0]
  if not path.lower().endswith(IMAGES):
    return None
  where = Path(os.path.normpath(docs / posixpath.dirname(page_uri) / path))
  try:
    repo_path = where.relative_to(root).as_posix()
  except ValueError:
    return None
  if where.is_relative_to(docs) or not repo_path.startswith(ALLOWED) or not where.is_file():
    return None
  return repo_path


def on_files(files: Files, config: Any) -> Files:
  """Adds every allowed image that a page links from outside docs/ to the site's files."""
  docs = Path(os.path.abspath(config["docs_dir"]))
  root = docs.parent
  _REWRITES.clear()
  added: set[str] = set()
  for file in list(files.documentation_pages()):
    text = Path(file.abs_src_path or "").read_text(encoding="utf-8")
    for match in _LINK.finditer(text):
      target = match.group(1) or match.group(2)
      repo_path = _external_image(file.src_uri, target, docs, root)
      if repo_path is None:
        continue
      site_uri = f"{SITE_FOLDER}/{repo_path}"
      relative = posixpath.relpath(site_uri, posixpath.dirname(file.src_uri) or ".")
      _REWRITES.setdefault(file.src_uri, {})[target] = relative
      if site_uri not in added:
        added.add(site_uri)
        files.append(File.generated(config, site_uri, abs_src_path=str(root / repo_path)))
  return files


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
  """Points the page's links to images outside docs/ at their copies in the site."""
  for target, relative in _REWRITES.get(page.file.src_uri, {}).items():
    markdown = markdown.replace(f"]({target}", f"]({relative}")
    markdown = markdown.replace(f'="{target}"', f'="{relative}"')
  return markdown

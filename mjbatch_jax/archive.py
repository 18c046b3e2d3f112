"""Arrays with a JSON header in one .npz file: PPO checkpoints and the examples' saved results.

One reader and one writer, so that every such file is written atomically (never half a file,
even when the process is killed mid-write) and every failure to read one is a ValueError naming
the file and what is wrong with it, whatever numpy, zipfile or json raised underneath.

  archive.write("plan.npz", {"ctrls": ctrls}, {"kind": "backflip", "version": "3"})
  arrays, header = archive.read("plan.npz")
"""

import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

HEADER = "__header__"  # the array that holds the JSON header, unless a file's format names another


def write(path: str | Path, arrays: Mapping[str, Any], header: Mapping[str, Any], *,
          header_key: str = HEADER, compress: bool = False) -> Path:
  """Write arrays and header (JSON-serialisable) to path, atomically; the path written.

  The file appears whole or not at all: it is written beside its final name and renamed over it.
  """
  path = Path(path)
  if header_key in arrays:
    raise ValueError(f"an array may not be named {header_key!r}: the header is stored there")
  values: dict[str, Any] = {str(key): np.asarray(value) for key, value in arrays.items()}
  bad = [key for key, value in values.items() if value.dtype == object]
  if bad:
    raise ValueError(f"arrays {bad} hold Python objects, which .npz stores only by pickling")
  values[header_key] = np.array(json.dumps(plain(header), allow_nan=True))
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_name(path.name + ".tmp.npz")
  if compress:
    np.savez_compressed(tmp, **values)
  else:
    np.savez(tmp, **values)
  tmp.replace(path)
  return path


def read(path: str | Path, *, header_key: str = HEADER, what: str = "an archive"
         ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """(arrays by name, header) of a file that write made; ValueError saying why it cannot be read.

  what: how the message names the kind of file expected ("a PPO checkpoint").
  """
  path = Path(path)
  if not path.is_file():
    raise ValueError(f"no file {path} ({what} expected there)")
  try:
    saved = np.load(path, allow_pickle=False)
    if not isinstance(saved, np.lib.npyio.NpzFile):
      raise ValueError("a single .npy array, not an .npz archive")
    with saved:
      arrays = {key: saved[key] for key in saved.files}
  except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as e:
    raise ValueError(f"{path} is not {what} (an .npz archive that numpy can read): "
                     f"{type(e).__name__}: {e}") from None
  if header_key not in arrays:
    raise ValueError(f"{path} is not {what}: it has no {header_key!r} header")
  raw = arrays.pop(header_key)
  if raw.shape != () or raw.dtype.kind != "U":
    raise ValueError(f"{path} is not {what}: its header is a {raw.dtype} array of shape "
                     f"{raw.shape}, not one JSON string")
  try:
    header = json.loads(str(raw))
  except ValueError as e:
    raise ValueError(f"{path} is not {what}: its header is not JSON ({e})") from None
  if not isinstance(header, dict):
    raise ValueError(f"{path} is not {what}: its header is a JSON {type(header).__name__}, "
                     "not an object")
  return arrays, header


def check_writable(path: str | Path, what: str = "path") -> Path:
  """path, after checking that a file can be written there (its folder is made if missing).

  For long runs that write at the end of a period: a bad path fails before the work, not after.
  """
  path = Path(path)
  if path.is_dir():
    raise ValueError(f"{what} {path} is a folder, not a file name")
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
      pass
  except OSError as e:
    raise ValueError(f"{what} {path} cannot be written: {e.strerror or e}") from None
  if path.exists() and not os.access(path, os.W_OK):
    raise ValueError(f"{what} {path} exists and is not writable")
  return path


def plain(value: Any) -> Any:
  """value with mappings and sequences made JSON's dicts and lists, numpy scalars numbers."""
  if isinstance(value, Mapping):
    return {str(k): plain(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [plain(v) for v in value]
  if isinstance(value, np.generic):
    return value.item()
  return value


__all__ = ["HEADER", "check_writable", "plain", "read", "write"]

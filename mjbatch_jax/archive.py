"""Arrays with a JSON header in one .npz file: PPO checkpoints and the examples' saved results.

One reader and one writer, so that every such file is written atomically (never half a file,
even when the process is killed mid-write) and every failure to read one is a ValueError naming
the file and what is wrong with it, whatever numpy, zipfile or json raised underneath.

  archive.write("plan.npz", {"ctrls": ctrls}, {"kind": "backflip", "version": "3"})
  arrays, header = archive.read("plan.npz")
"""

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

import numpy as np

HEADER = "__header__"  # the array that holds the JSON header, unless a file's format names another


def write(path: str | Path, arrays: Mapping[str, Any], header: Mapping[str, Any], *,
          header_key: str = HEADER, compress: bool = False) -> Path:
  """Write arrays and header (JSON-serialisable) to path, atomically; the path written.

  The file appears whole or not at all: it is written beside its final name and renamed over it,
  and a failed write removes what it wrote. path: a file name (str or os.PathLike), not a
  folder; its folder is made if missing. ValueError, before anything is written, for a path that
  cannot be a file.
  """
  path = _check_file(_path(path), "path")
  if not isinstance(arrays, Mapping) or not isinstance(header, Mapping):
    raise ValueError(f"arrays and header must be mappings (dicts), got "
                     f"{type(arrays).__name__} and {type(header).__name__}")
  if header_key in arrays:
    raise ValueError(f"an array may not be named {header_key!r}: the header is stored there")
  values: dict[str, Any] = {}
  for key, value in arrays.items():
    name = str(key)
    if name in values or not name or "\0" in name:
      raise ValueError(f"array names must be distinct non-empty strings without NUL once made "
                       f"str, got {key!r}" + (" twice" if name in values else ""))
    values[name] = np.asarray(value)
  bad = [key for key, value in values.items() if value.dtype.hasobject]
  if bad:
    raise ValueError(f"arrays {bad} hold Python objects, which .npz stores only by pickling")
  text = json.dumps(plain(header), allow_nan=True)
  if len(json.loads(text)) != len(header):
    raise ValueError("header keys must be distinct once made str")
  values[header_key] = np.array(text)
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise ValueError(f"path {path} cannot be written: its folder {path.parent} cannot be made "
                     f"({e.strerror or e})") from None
  # A name of its own for each write: two writers of one path never share a half-written file.
  try:
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp.npz")
  except OSError as e:
    raise ValueError(f"path {path} cannot be written: {e.strerror or e}") from None
  os.close(handle)
  tmp = Path(name)
  try:
    if compress:
      np.savez_compressed(tmp, **values)
    else:
      np.savez(tmp, **values)
    tmp.replace(path)
  except BaseException:
    with contextlib.suppress(OSError):
      tmp.unlink(missing_ok=True)
    raise
  return path


def _check_file(path: Path, what: str) -> Path:
  """path, unless something other than a regular file is there (a folder, a FIFO, a device):
  renaming over it would replace it."""
  if path.is_dir():
    raise ValueError(f"{what} {path} is a folder, not a file name")
  if path.exists() and not path.is_file():
    raise ValueError(f"{what} {path} exists and is not a regular file (a FIFO, a device, ...): "
                     f"not replacing it")
  return path


def read(path: str | Path, *, header_key: str = HEADER, what: str = "an archive"
         ) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
  """(arrays by name, header) of a file that write made; ValueError saying why it cannot be read.

  The file is untrusted input: whatever the parsers raise on it (BadZipFile, EOFError, zlib's
  errors, RecursionError of a deeply nested JSON, ...) is a ValueError naming the file, and every
  member's checksum is checked, since numpy reads a member without zip's CRC check (a flipped
  byte in the weights would load as another weight).

  what: how the message names the kind of file expected ("a PPO checkpoint").
  """
  path = _path(path)
  if not path.is_file():
    raise ValueError(f"no file {path} ({what} expected there)")

  def bad(why: str) -> ValueError:
    return ValueError(f"{path} is not {what}: {why}")

  try:
    with path.open("rb") as f:
      magic = f.read(4)
  except OSError as e:
    raise bad(f"it cannot be read ({e.strerror or e})") from None
  if magic[:2] != b"PK" and magic != b"\x93NUM":  # numpy's message would suggest unpickling
    raise bad("not an .npz archive (a zip file): " + ("an empty file" if not magic else
                                                      f"it starts with {magic!r}"))
  try:
    saved = np.load(path, allow_pickle=False)
  except Exception as e:
    raise bad(f"not an .npz archive ({type(e).__name__}: {e})") from None
  if not isinstance(saved, np.lib.npyio.NpzFile):
    raise bad("a single .npy array, not an .npz archive")
  arrays: dict[str, np.ndarray] = {}
  with saved:
    try:
      corrupted = saved.zip.testzip() if saved.zip is not None else None
    except Exception as e:
      raise bad(f"a corrupted .npz archive ({type(e).__name__}: {e})") from None
    if corrupted is not None:
      raise bad(f"a corrupted .npz archive: {corrupted!r} fails its CRC check")
    names = saved.zip.namelist() if saved.zip is not None else []
    if len(set(names)) != len(names):  # only one of each name would be read, or checked
      raise bad("a corrupted .npz archive: member names repeat")
    for key in saved.files:
      try:
        arrays[key] = saved[key]
      except Exception as e:
        raise bad(f"its array {key!r} cannot be read ({type(e).__name__}: {e})") from None
      if not isinstance(arrays[key], np.ndarray):  # numpy hands back a non-.npy member's bytes
        raise bad(f"its member {key!r} is not a .npy array")
  raw = arrays.pop(header_key, None)
  if raw is None:
    raise bad(f"no {header_key} header (an .npz archive of something else)")
  if raw.shape != () or raw.dtype.kind != "U":
    raise bad(f"its {header_key} header must be a JSON string, got a {raw.dtype} array of "
              f"shape {raw.shape}")
  try:
    header = json.loads(str(raw))
  except (ValueError, RecursionError) as e:
    raise bad(f"its {header_key} header is not JSON ({type(e).__name__}: {e})") from None
  if not isinstance(header, dict):
    text = repr(header)
    raise bad(f"its {header_key} header must be a JSON object, got "
              f"{text if len(text) <= 80 else text[:77] + '...'}")
  return arrays, header


def check_writable(path: str | Path, what: str = "path") -> Path:
  """path, after checking that a file can be written there (its folder is made if missing).

  For long runs that write at the end of a period: a bad path fails before the work, not after.
  A refusal removes the folders this call made (only those, and only while empty): a refused
  path leaves nothing behind.
  """
  path = _check_file(_path(path, what), what)
  # Deepest first, as they are removed; lexists: a dangling link is there (mkdir fails on it).
  made = [p for p in (path.parent, *path.parent.parents) if not os.path.lexists(p)]
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".probe"):
      pass
  except OSError as e:
    for folder in made:
      try:
        folder.rmdir()
      except OSError:  # not made (mkdir failed first), or another process put a file there
        pass
    raise ValueError(f"{what} {path} cannot be written: {e.strerror or e}") from None
  if path.exists() and not os.access(path, os.W_OK):
    raise ValueError(f"{what} {path} exists and is not writable")
  return path


def _path(path: Any, what: str = "path") -> Path:
  """path as a Path; ValueError unless it is a str or os.PathLike (a file name)."""
  want = f"{what} must be a file name (a str or os.PathLike), got"
  if not isinstance(path, (str, os.PathLike)):
    raise ValueError(f"{want} {type(path).__name__}")
  try:
    return Path(path)
  except TypeError:  # an os.PathLike of bytes
    raise ValueError(f"{want} {path!r}") from None


def plain(value: Any) -> Any:
  """value as JSON holds it: mappings dicts with text keys, sequences lists, numpy's and JAX's
  arrays and scalars numbers (arrays nested lists, every element shown: numpy's repr elides a
  long array's middle), a dataclass instance its fields' dict, a path its text.

  One converter for every header, record and setting compared across processes, so that
  (0, 1) and [0, 1], or 0 and np.int64(0), are the same everywhere:

    plain({"gains": (np.float64(2.0), 1), "path": Path("a.npz")})  # {"gains": [2.0, 1], ...}
  """
  if isinstance(value, str | bytes | bool) or value is None:
    return value
  if dataclasses.is_dataclass(value) and not isinstance(value, type):
    return plain(dataclasses.asdict(value))
  if isinstance(value, Mapping):
    return {str(k): plain(v) for k, v in value.items()}
  if isinstance(value, np.ndarray | np.generic) or (hasattr(value, "__array__")
                                                     and hasattr(value, "shape")):  # JAX's
    return np.asarray(value).tolist()
  if isinstance(value, Sequence):
    return [plain(v) for v in value]
  if isinstance(value, PurePath):
    return str(value)
  return value


__all__ = ["HEADER", "check_writable", "plain", "read", "write"]

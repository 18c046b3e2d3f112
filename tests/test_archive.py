"""mjbatch_jax.archive: the one reader and writer of arrays with a JSON header (.npz)."""

import zipfile

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mjbatch_jax import archive


def test_round_trip_keeps_arrays_and_header(tmp_path):
  arrays = {"a": np.arange(6.0).reshape(2, 3), "b": np.array([1, 2], np.int32)}
  header = {"kind": "test", "n": np.int64(3), "nested": {"x": (1, 2)}}
  for compress in (False, True):
    path = archive.write(tmp_path / f"r{compress}.npz", arrays, header, compress=compress)
    got, meta = archive.read(path)
    assert set(got) == {"a", "b"}
    np.testing.assert_array_equal(got["a"], arrays["a"])
    assert got["b"].dtype == np.int32
    assert meta == {"kind": "test", "n": 3, "nested": {"x": [1, 2]}}
  assert not list(tmp_path.glob("*.tmp.npz"))  # the temporary file was renamed away


def test_header_key_is_the_files_choice(tmp_path):
  path = archive.write(tmp_path / "c.npz", {"x": np.zeros(2)}, {"format": 1}, header_key="__meta__")
  assert archive.read(path, header_key="__meta__")[1] == {"format": 1}
  with pytest.raises(ValueError, match="no __header__ header"):
    archive.read(path)


def test_write_refuses_what_it_could_not_read_back(tmp_path):
  with pytest.raises(ValueError, match="may not be named '__header__'"):
    archive.write(tmp_path / "x.npz", {"__header__": np.zeros(1)}, {})
  with pytest.raises(ValueError, match="hold Python objects"):
    archive.write(tmp_path / "x.npz", {"o": np.array([{}, 1], dtype=object)}, {})
  assert not (tmp_path / "x.npz").exists()


def test_write_refuses_data_it_would_lose_or_mangle(tmp_path):
  path = tmp_path / "x.npz"
  for arrays, header, message in (
      ({1: np.zeros(1), "1": np.ones(2)}, {}, "distinct .* got '1' twice"),
      ({"a\0b": np.zeros(1)}, {}, "without NUL"),
      ({"": np.zeros(1)}, {}, "non-empty"),
      ({"x": np.zeros(2, dtype=[("o", object)])}, {}, "hold Python objects"),
      ({"x": np.zeros(1)}, {1: "a", "1": "b"}, "header keys must be distinct"),
      ({"x": np.zeros(1)}, [1, 2], "arrays and header must be mappings"),
      ([("x", np.zeros(1))], {}, "arrays and header must be mappings")):
    with pytest.raises(ValueError, match=message):
      archive.write(path, arrays, header)  # pyright: ignore[reportArgumentType]
  assert list(tmp_path.iterdir()) == []


def test_write_replaces_only_a_regular_file(tmp_path):
  import os

  fifo = tmp_path / "pipe.npz"
  os.mkfifo(fifo)
  for call in (lambda: archive.write(fifo, {"x": np.zeros(1)}, {}),
               lambda: archive.check_writable(fifo)):
    with pytest.raises(ValueError, match="exists and is not a regular file"):
      call()
  assert fifo.is_fifo()


def test_writers_of_one_path_never_leave_it_torn(tmp_path):
  """Each write has a temporary file of its own: concurrent writers of one path leave one
  whole file, the last renamed, and no temporary files."""
  import threading

  path, errors = tmp_path / "a.npz", []

  def writer(k):
    try:
      for i in range(20):
        archive.write(path, {f"k{k}": np.full(2000, i, float)}, {"k": k}, compress=True)
        archive.read(path)
    except Exception as e:  # noqa: BLE001  (reported below)
      errors.append(e)

  threads = [threading.Thread(target=writer, args=(k,)) for k in range(3)]
  for thread in threads:
    thread.start()
  for thread in threads:
    thread.join()
  assert errors == [] and [p.name for p in tmp_path.iterdir()] == ["a.npz"]


def test_repeated_member_names_are_a_corrupted_archive(tmp_path):
  path = archive.write(tmp_path / "a.npz", {"x": np.zeros(2)}, {})
  with zipfile.ZipFile(path, "a") as z, pytest.warns(UserWarning, match="Duplicate name"):
    z.writestr("x.npy", b"")
  with pytest.raises(ValueError, match="member names repeat"):
    archive.read(path)


@pytest.mark.parametrize("case", ["empty", "truncated", "garbage", "npy", "list", "text", "string",
                                  "noheader", "header_array"])
def test_every_bad_file_is_a_value_error_naming_it(tmp_path, case):
  path = tmp_path / f"{case}.npz"
  if case == "empty":
    path.write_bytes(b"")
  elif case == "truncated":
    data = archive.write(tmp_path / "g.npz", {"x": np.arange(100.0)}, {"k": 1}).read_bytes()
    path.write_bytes(data[: len(data) // 2])
  elif case == "garbage":
    path.write_bytes(bytes(range(256)) * 4)
  elif case == "npy":
    with path.open("wb") as f:
      np.save(f, np.zeros(3))
  elif case == "noheader":
    np.savez(path, x=np.zeros(2))
  elif case == "header_array":
    np.savez(path, __header__=np.zeros(2))
  else:
    text = {"list": "[1, 2]", "text": "not json", "string": '"s"'}[case]
    np.savez(path, x=np.zeros(2), __header__=np.array(text))
  with pytest.raises(ValueError, match=str(path.name)):
    archive.read(path, what="a test file")


def test_a_missing_file_names_what_was_expected(tmp_path):
  with pytest.raises(ValueError, match="a PPO checkpoint expected"):
    archive.read(tmp_path / "none.npz", what="a PPO checkpoint")


@given(st.binary(max_size=600))
def test_random_bytes_are_refused_with_value_error_only(tmp_path_factory, data):
  path = tmp_path_factory.mktemp("bytes") / "random.npz"
  path.write_bytes(data)
  with pytest.raises(ValueError):
    archive.read(path)


@given(st.binary(min_size=1, max_size=200), st.integers(0, 10_000))
def test_a_corrupted_archive_is_refused_or_read_whole(tmp_path_factory, noise, at):
  # Bytes overwritten anywhere in a valid archive: a ValueError, or (where zip's checksums do not
  # cover the bytes) the arrays and header as written. Never another exception type.
  folder = tmp_path_factory.mktemp("corrupt")
  path = archive.write(folder / "c.npz", {"x": np.arange(50.0)}, {"k": 1})
  data = bytearray(path.read_bytes())
  at = at % len(data)
  data[at : at + len(noise)] = noise
  path.write_bytes(bytes(data))
  try:
    arrays, header = archive.read(path)
  except ValueError:
    return
  except zipfile.BadZipFile as e:  # pragma: no cover - the failure this test exists to catch
    raise AssertionError(f"BadZipFile leaked: {e}") from e
  assert isinstance(header, dict)
  assert all(isinstance(v, np.ndarray) for v in arrays.values())


def test_check_writable(tmp_path):
  target = archive.check_writable(tmp_path / "deep" / "er" / "ck.npz")
  assert target.parent.is_dir() and not target.exists()
  assert not list(target.parent.iterdir())  # the probe is gone
  with pytest.raises(ValueError, match="is a folder"):
    archive.check_writable(tmp_path)
  blocker = tmp_path / "file"
  blocker.write_text("x")
  with pytest.raises(ValueError, match="cannot be written"):
    archive.check_writable(blocker / "ck.npz", what="checkpoint")


def test_check_writable_removes_the_folders_it_made_when_it_refuses(tmp_path):
  """A refusal left behind the folders mkdir had made; now only those go, deepest first."""
  kept = tmp_path / "kept"
  kept.mkdir()
  # The file's name fits (249 characters) but the probe's (.<name>.<random>.probe) does not: the
  # folders are made, then the probe fails.
  long = "a" * 245 + ".npz"
  with pytest.raises(ValueError, match="cannot be written"):
    archive.check_writable(kept / "new" / "deeper" / long)
  assert [p.name for p in tmp_path.rglob("*")] == ["kept"]
  # mkdir itself fails part of the way: a folder's name too long below one it made.
  with pytest.raises(ValueError, match="cannot be written"):
    archive.check_writable(kept / "made" / ("b" * 300) / "ck.npz")
  assert [p.name for p in tmp_path.rglob("*")] == ["kept"]
  (kept / "other").write_text("x")  # a folder it did not make stays, with what it holds
  with pytest.raises(ValueError, match="cannot be written"):
    archive.check_writable(kept / long)
  assert sorted(p.name for p in tmp_path.rglob("*")) == ["kept", "other"]


def test_plain_is_what_json_holds_the_same_for_equal_settings():
  import dataclasses
  from pathlib import Path

  import jax.numpy as jnp

  @dataclasses.dataclass(frozen=True)
  class Config:
    gains: tuple = (np.float64(2.0), 1)
    where: Path = Path("results/a.npz")

  assert archive.plain({"config": Config(), 3: np.int64(4), "ok": np.bool_(True)}) == {
    "config": {"gains": [2.0, 1], "where": "results/a.npz"}, "3": 4, "ok": True}
  assert archive.plain((0, 1)) == archive.plain([0, 1]) == archive.plain(np.arange(2)) == [0, 1]
  assert archive.plain(jnp.arange(3.0)) == [0.0, 1.0, 2.0]
  # Every element of a long array, where numpy's repr elides the middle: two selections that
  # differ there are two settings.
  long = np.arange(5000)
  assert repr(archive.plain(long)) != repr(archive.plain(np.where(long == 2500, -1, long)))
  assert archive.plain(["text", b"raw", None, 1.5]) == ["text", b"raw", None, 1.5]
  assert archive.plain(Config) is Config  # a class is no record
  assert type(archive.plain(np.float32(0.5))) is float and type(archive.plain(np.int8(3))) is int

"""Reference clips: a motion as poses per frame, saved beside the model it was made for.

A clip is what a tracker follows: its frames' qpos every dt seconds, optionally their qvel and
which contacts hold, and the world poses of the bodies a cost tracks (computed from qpos by
forward kinematics, so that a cost reads them without running MuJoCo). A saved clip records its
format version and the fingerprint of the model's kinematic tree, so that loading it for another
robot, or a file of another format, is refused with the reason rather than tracked wrongly.

  clip = make(model, qpos, dt=0.02, bodies=("pelvis", "left_foot"), metadata={"name": "squat"})
  save("squat.npz", clip, model)
  clip = load("squat.npz", model)
  clip.xpos[:, clip.bodies.index("pelvis")]  # (F, 3)
"""

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import mujoco
import numpy as np

from mjbatch_jax import _validate as v
from mjbatch_jax import archive
from mjbatch_jax.motion._arrays import mj_model, numbers
from mjbatch_jax.names import Names

FORMAT = "mjbatch_jax.motion.clip"
VERSION = 1


@dataclasses.dataclass(frozen=True, eq=False)  # arrays: compare them with np.array_equal
class Clip:
  """A motion, frame by frame (F frames, B tracked bodies).

  dt: seconds between frames. qpos: (F, nq). bodies: the tracked bodies' names; xpos (F, B, 3)
  and xquat (F, B, 4) their world poses. qvel: (F, nv) or None. contact: (F, ...) bool or None
  (which contacts hold: the caller's convention, e.g. one column per foot). metadata: anything
  JSON can hold.
  """

  dt: float
  qpos: np.ndarray
  bodies: tuple[str, ...] = ()
  xpos: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0, 3)))
  xquat: np.ndarray = dataclasses.field(default_factory=lambda: np.zeros((0, 0, 4)))
  qvel: np.ndarray | None = None
  contact: np.ndarray | None = None
  metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  @property
  def frames(self) -> int:
    return len(self.qpos)


def fingerprint(model: mujoco.MjModel) -> str:
  """A hash of the model's kinematic tree: what a clip's poses depend on.

  Bodies (names, parents, frames) and joints (names, types, bodies, positions, axes, addresses),
  not masses, actuators, sensors or contacts: a clip made on a robot fits the same robot with
  contact sensors added or its links' masses randomised.

  Example:
    assert fingerprint(model_a) == fingerprint(model_b)
  """
  model = mj_model("model", model)
  names = Names.of(model)
  digest = hashlib.sha256()
  for kind in ("body", "joint"):
    digest.update(repr(names.named(kind)).encode())
  for field in (model.body_parentid, model.body_pos, model.body_quat, model.jnt_type,
                model.jnt_bodyid, model.jnt_pos, model.jnt_axis, model.jnt_qposadr,
                model.jnt_dofadr, np.array([model.nq, model.nv])):
    digest.update(np.ascontiguousarray(field).tobytes())
  return digest.hexdigest()[:16]


def body_poses(model: mujoco.MjModel, qpos: Any, bodies: Sequence[str]
               ) -> tuple[np.ndarray, np.ndarray]:
  """World positions (F, B, 3) and orientations (F, B, 4) of bodies at each qpos (F, nq).

  Example:
    xpos, xquat = body_poses(model, clip_qpos, ["pelvis", "torso_link"])
  """
  model = mj_model("model", model)
  qpos = numbers("qpos", qpos, (None, model.nq))
  ids = Names.of(model).ids("body", _names("bodies", bodies))
  data = mujoco.MjData(model)
  xpos, xquat = np.zeros((len(qpos), len(ids), 3)), np.zeros((len(qpos), len(ids), 4))
  for i, q in enumerate(qpos):
    data.qpos[:] = q
    mujoco.mj_kinematics(model, data)
    xpos[i], xquat[i] = data.xpos[ids], data.xquat[ids]
  return xpos, xquat


def make(model: mujoco.MjModel, qpos: Any, dt: float, bodies: Sequence[str] = (), *,
         qvel: Any = None, contact: Any = None, metadata: Mapping[str, Any] | None = None
         ) -> Clip:
  """A clip of qpos (F, nq) every dt seconds, with the poses of bodies computed from it.

  Args:
    model: the robot's mujoco.MjModel; the bodies' world poses come from its forward
      kinematics (mj_kinematics) at each frame's qpos.
    qpos: (F, nq) finite poses, one per frame, F >= 1.
    dt: seconds between frames, a number > 0.
    bodies: names of the bodies whose world poses the clip keeps (xpos, xquat), for a tracking
      cost; default none.
    qvel: (F, nv) finite velocities, one per frame, or None (default).
    contact: (F, ...) bool, which contacts hold at each frame (the caller's convention, e.g. one
      column per foot), or None (default).
    metadata: anything JSON can hold, saved with the clip ({"name": "squat"}); default {}.

  Returns:
    A Clip, its arrays float64 (contact bool) and every shape checked against model.

  Raises:
    ValueError: model is not an MjModel, a shape does not fit model or the frames, a value is
      not finite, dt <= 0, a body name is unknown, contact is not bool, or metadata is not a
      mapping that JSON can hold.

  Example:
    clip = make(model, qpos, 0.02, ["pelvis"], contact=feet_down)
  """
  model = mj_model("model", model)
  qpos = numbers("qpos", qpos, (None, model.nq))
  bodies = _names("bodies", bodies)
  # Every argument checked before the frames' kinematics (a long clip's take seconds): the
  # poses as placeholders of their shapes, then computed.
  frames, count = len(qpos), len(bodies)
  clip = _checked(model, Clip(dt, qpos, bodies, np.zeros((frames, count, 3)),
                              np.zeros((frames, count, 4)), qvel, contact,
                              {} if metadata is None else metadata))
  xpos, xquat = body_poses(model, clip.qpos, clip.bodies)
  return dataclasses.replace(clip, xpos=xpos, xquat=xquat)


def save(path: str | Path, clip: Clip, model: mujoco.MjModel) -> Path:
  """Write clip to path (.npz, atomically) with the format version and model's fingerprint.

  path: a file name (str or os.PathLike), not a folder; its folder is made if missing. Every
  argument is checked before anything is written, and a failed write leaves no file behind.

  Example:
    save("squat.npz", clip, model)
  """
  model = mj_model("model", model)
  if not isinstance(clip, Clip):
    raise ValueError(f"clip must be a Clip, got {type(clip).__name__}")
  clip = _checked(model, clip)
  arrays = {"qpos": clip.qpos, "xpos": clip.xpos, "xquat": clip.xquat}
  arrays.update({k: x for k, x in (("qvel", clip.qvel), ("contact", clip.contact))
                 if x is not None})
  header = {"format": FORMAT, "version": VERSION, "model": fingerprint(model), "dt": clip.dt,
            "bodies": list(clip.bodies), "metadata": dict(clip.metadata)}
  return archive.write(path, arrays, header, compress=True)


def load(path: str | Path, model: mujoco.MjModel) -> Clip:
  """The clip saved at path; ValueError if it is not a clip of this version for this model.

  Example:
    clip = load("squat.npz", model)
  """
  model = mj_model("model", model)
  arrays, header = archive.read(path, what="a motion clip")
  if header.get("format") != FORMAT:
    raise ValueError(f"{path} is not a motion clip: its header's format is "
                     f"{v.shown(header.get('format'))}, expected {FORMAT!r}")
  if header.get("version") != VERSION:
    raise ValueError(f"{path} is a motion clip of format version "
                     f"{v.shown(header.get('version'))}; this version reads version {VERSION}")
  if header.get("model") != fingerprint(model):
    raise ValueError(f"{path} is a clip of another model (kinematic fingerprint "
                     f"{header.get('model')}, this model's is {fingerprint(model)})")
  missing = [k for k in ("qpos", "xpos", "xquat") if k not in arrays]
  missing += [k for k in ("dt", "bodies", "metadata") if k not in header]
  if missing:
    raise ValueError(f"{path} is a motion clip missing {', '.join(missing)}")
  return _checked(model, Clip(header["dt"], arrays["qpos"], header["bodies"],
                              arrays["xpos"], arrays["xquat"], arrays.get("qvel"),
                              arrays.get("contact"), header["metadata"]), where=f"{path}: ")


def _names(name: str, values: Any) -> tuple[str, ...]:
  if isinstance(values, str) or not isinstance(values, Sequence):
    raise ValueError(f"{name} must be a sequence of body names, got {v.shown(values)}")
  if not all(isinstance(n, str) for n in values):
    raise ValueError(f"{name} must be body names (strings), got {v.shown(values)}")
  return tuple(values)


def _metadata(value: Any) -> dict[str, Any]:
  """value, a mapping JSON can hold, as the dict save writes (archive.plain's: numpy scalars
  and arrays made numbers and lists, tuples lists)."""
  if not isinstance(value, Mapping):
    raise ValueError(f"metadata must be a mapping, got {v.shown(value)}")
  metadata = dict(archive.plain(value))
  try:  # as save writes it: refused when the clip is made rather than when it is saved
    json.dumps(metadata, allow_nan=True)
  except (TypeError, ValueError, RecursionError) as e:
    raise ValueError(f"metadata must hold only what JSON can (dicts, lists, strings, numbers, "
                     f"booleans, None), got {v.shown(value)} ({type(e).__name__}: {e})") from None
  return metadata


def _checked(model: mujoco.MjModel, clip: Clip, where: str = "") -> Clip:
  """clip with its arrays as float64 (contact as bool) and every shape checked against model."""
  try:
    frames = len(numbers("qpos", clip.qpos, (None, model.nq)))
    if frames == 0:
      raise ValueError("qpos must hold at least one frame")
    bodies = _names("bodies", clip.bodies)
    Names.of(model).ids("body", bodies)
    b = len(bodies)
    xpos, xquat = clip.xpos, clip.xquat
    if b == 0 and np.size(xpos) == 0 and np.size(xquat) == 0:  # nothing tracked
      xpos, xquat = np.zeros((frames, 0, 3)), np.zeros((frames, 0, 4))
    fields = {
      "dt": v.number("dt", clip.dt, 0.0, low_open=True),
      "qpos": numbers("qpos", clip.qpos),
      "bodies": bodies,
      "xpos": numbers("xpos", xpos, (frames, b, 3)),
      "xquat": numbers("xquat", xquat, (frames, b, 4)),
      "qvel": None if clip.qvel is None else numbers("qvel", clip.qvel, (frames, model.nv)),
    }
    if clip.contact is not None:
      contact = np.asarray(clip.contact)
      if contact.dtype != bool or contact.ndim < 1 or len(contact) != frames:
        raise ValueError(f"contact must be booleans with {frames} rows (one per frame), got "
                         f"{v.shown(contact)} of dtype {contact.dtype}")
      fields["contact"] = contact
    fields["metadata"] = _metadata(clip.metadata)
  except ValueError as e:
    raise ValueError(f"{where}{e}") from None
  return dataclasses.replace(clip, **fields)


__all__ = ["FORMAT", "VERSION", "Clip", "body_poses", "fingerprint", "load", "make", "save"]

"""Floor-contact sensors: how many contacts named bodies have with the floor, every step.

MuJoCo's contact sensor (mjSENS_CONTACT) matches contacts between two objects and reports what
is asked of them; here it reports only whether they were found, in one slot, whose value is then
the number of matching contacts. A sensor reads the contacts that the step found and changes
nothing: a model with these sensors steps bit for bit as the model without them, and a rollout
reports each step's contacts in its sensordata.

  spec = mujoco.MjSpec.from_file("scene.xml")
  names = floor_contact_sensors(spec, {"left foot": "left_ankle_roll_link"}, robot="pelvis")
  model = spec.compile()
  # names: ("floor contact left foot", "floor contact robot")
"""

from collections.abc import Mapping, Sequence

import mujoco

from mjbatch_jax import _validate as v
from mjbatch_jax.names import did_you_mean

PREFIX = "floor contact"


def floor_contact_sensors(spec: mujoco.MjSpec, bodies: Mapping[str, str] | Sequence[str], *,
                          robot: str | None = None, floor: str = "floor",
                          prefix: str = PREFIX) -> tuple[str, ...]:
  """Add to spec one contact sensor per body, and one for a whole subtree; their names.

  Args:
    spec: the model's MjSpec, before compiling (it is changed in place).
    bodies: {label: body name}, or body names (each its own label). A body's sensor counts the
      contacts of that body's own geoms with the floor, named f"{prefix} {label}".
    robot: a body whose subtree is the robot (its root, e.g. "pelvis"): a sensor named
      f"{prefix} robot" counts the contacts of any of its bodies with the floor. None: no such
      sensor.
    floor: the floor geom's name.
    prefix: what the sensors' names begin with (a string).

  Raises:
    ValueError: spec is not an MjSpec, a body or the floor is not in it, a name is not a string,
      or a sensor's name is taken.

  Example:
    names = floor_contact_sensors(spec, ["left_foot", "right_foot"], robot="torso")
    model = spec.compile()
    counts = data.sensordata[[model.sensor(n).adr[0] for n in names]]
  """
  if not isinstance(spec, mujoco.MjSpec):
    raise ValueError(f"spec must be a mujoco.MjSpec, got {type(spec).__name__}")
  if not isinstance(floor, str):
    raise ValueError(f"floor must be the floor geom's name (a string), got {v.shown(floor)}")
  if not isinstance(prefix, str):
    raise ValueError(f"prefix must be a string (the sensors' names begin with it), got "
                     f"{v.shown(prefix)}")
  # mjOBJ_BODY matches the body's own geoms, mjOBJ_XBODY those of its whole subtree.
  if isinstance(bodies, Mapping):
    wanted = [(label, body, mujoco.mjtObj.mjOBJ_BODY) for label, body in bodies.items()]
  elif isinstance(bodies, Sequence) and not isinstance(bodies, str):
    wanted = [(b, b, mujoco.mjtObj.mjOBJ_BODY) for b in bodies]
  else:
    raise ValueError(f"bodies must be a mapping from labels to body names or a sequence of body "
                     f"names, got {v.shown(bodies)}")
  if robot is not None:
    wanted.append(("robot", robot, mujoco.mjtObj.mjOBJ_XBODY))
  if not wanted:
    raise ValueError("bodies must name at least one body (or robot a subtree)")
  known = {b.name for b in spec.bodies if b.name}
  for label, body, _ in wanted:
    if not isinstance(label, str) or not isinstance(body, str):
      raise ValueError(f"labels and body names must be strings, got {label!r}: {body!r}")
    if body not in known:
      raise ValueError(f"the spec has no body named {body!r}{did_you_mean(body, known)}")
  geoms = {g.name for g in spec.geoms if g.name}
  if floor not in geoms:
    raise ValueError(f"the spec has no geom named {floor!r}{did_you_mean(floor, geoms)}: floor "
                     f"must name the floor geom that the sensors count contacts with")
  names = tuple(f"{prefix} {label}" for label, _, _ in wanted)
  taken = {s.name for s in spec.sensors if s.name} & set(names)
  if len(set(names)) != len(names) or taken:
    raise ValueError(f"sensor names must be new and distinct, got {list(names)} (already in the "
                     f"spec: {sorted(taken)})")
  for name, (_, body, objtype) in zip(names, wanted, strict=True):
    sensor = spec.add_sensor(name=name, type=mujoco.mjtSensor.mjSENS_CONTACT)
    sensor.objtype, sensor.objname = objtype, body
    sensor.reftype, sensor.refname = mujoco.mjtObj.mjOBJ_GEOM, floor
    sensor.intprm[0] = 1 << int(mujoco.mjtConDataField.mjCONDATA_FOUND)
    sensor.intprm[1] = 0  # no reduction
    sensor.intprm[2] = 1  # one slot: its "found" is the number of matching contacts
  return names


__all__ = ["PREFIX", "floor_contact_sensors"]

#!/usr/bin/env bash
# pyright cannot see into MuJoCo's compiled modules, which ship no stubs: write stubs of them into
# typings/ (ignored by git), with MuJoCo's pure-Python modules (batch, rollout) beside them.
set -euo pipefail
out=${1:-typings}
rm -rf "$out/mujoco"
python -m pybind11_stubgen mujoco -o "$out" --ignore-all-errors >/dev/null 2>&1
src=$(python -c "import mujoco, os; print(os.path.dirname(mujoco.__file__))")
for f in "$src"/*.py; do
  name=$(basename "$f" .py)
  [ -e "$out/mujoco/$name.pyi" ] || cp "$f" "$out/mujoco/$name.pyi"
done

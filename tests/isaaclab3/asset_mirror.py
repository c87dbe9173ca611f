"""Build the two USD files Isaac Lab 3's Isaac-Cartpole loads, from the installed packages, no network.

Run with Isaac Lab 3's interpreter: ``python asset_mirror.py ROOT``; then ``ISAACSIM_ASSET_ROOT=ROOT``.
Isaac Lab resolves ``ISAACLAB_NUCLEUS_DIR`` to ``$ISAACSIM_ASSET_ROOT/Isaac/IsaacLab``
(isaaclab/utils/assets.py, ``_resolve_asset_root``); the task asks for:

* ``Robots/Classic/Cartpole/cartpole.usd`` (isaaclab_assets/robots/cartpole.py): newton ships a
  flattened copy of that very asset, ``newton/examples/assets/cartpole_single_pendulum.usda``, whose
  ``defaultPrim`` names ``cartPole`` while its root prim is ``cartpole``: fixed, then exported as .usd;
* ``Environments/Grid/default_ground_plane_checker_v1/default_ground_plane.usda``
  (isaaclab/sim/spawners/from_files/from_files_cfg.py): a Z-up plane with a collision API is all the
  kit-less physics reads of it.
"""

from __future__ import annotations

import sys
from pathlib import Path

GROUND = """#usda 1.0
(
    defaultPrim = "GroundPlane"
    metersPerUnit = 1
    upAxis = "Z"
)

def Xform "GroundPlane"
{
    def Plane "CollisionPlane" (
        prepend apiSchemas = ["PhysicsCollisionAPI"]
    )
    {
        uniform token axis = "Z"
        double length = 100
        double width = 100
    }
}
"""


def build(root: Path) -> None:
    import newton  # the installed package holds the cartpole
    from pxr import Sdf

    lab = root / "Isaac" / "IsaacLab"
    source = Path(newton.__file__).parent / "examples" / "assets" / "cartpole_single_pendulum.usda"
    fixed = lab / "Robots" / "Classic" / "Cartpole" / "cartpole.usda"
    fixed.parent.mkdir(parents=True, exist_ok=True)
    fixed.write_text(source.read_text().replace('defaultPrim = "cartPole"', 'defaultPrim = "cartpole"', 1))
    layer = Sdf.Layer.FindOrOpen(str(fixed))
    if layer is None or not layer.Export(str(fixed.with_suffix(".usd"))):
        raise SystemExit(f"could not export {fixed} as .usd")
    ground = lab / "Environments" / "Grid" / "default_ground_plane_checker_v1" / "default_ground_plane.usda"
    ground.parent.mkdir(parents=True, exist_ok=True)
    ground.write_text(GROUND)


if __name__ == "__main__":
    build(Path(sys.argv[1]))

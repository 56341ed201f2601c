"""Frame strips: a clip drawn as side-view stick figures, one per sampled frame, left to right.

Example:
  >>> import matplotlib
  >>> matplotlib.use("Agg")
  >>> import matplotlib.pyplot as plt, numpy as np
  >>> fig, ax = plt.subplots()
  >>> pos = np.zeros((4, 3, 3)); pos[:, 1, 1] = 1.0; pos[:, 2, 2] = 0.5
  >>> draw_strip(ax, pos, np.array([-1, 0, 0]), frames=2, label="toy")
  2
"""

import numpy as np


def draw_strip(ax, positions: np.ndarray, parents: np.ndarray, *, mask: np.ndarray | None = None,
               frames: int = 6, spacing: float | None = None, y_offset: float = 0.0,
               color: str = "C0", label: str | None = None) -> int:
  """Draws `frames` evenly spaced frames of a clip as stick figures in the z-y plane.

  Args:
    ax: a matplotlib Axes.
    positions: [T, J, 3] joint positions (y up, z forward).
    parents: [J] parent indices (-1 root).
    mask: [J] bool real joints (padding is skipped); None = all.
    frames: how many frames to draw.
    spacing: horizontal distance between figures; None = 1.5 x the clip's extent.
    y_offset: vertical shift (to stack several strips in one Axes).
    color: line colour.
    label: legend label (put on the first figure only).

  Returns:
    The number of figures drawn.

  Example:
    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> import matplotlib.pyplot as plt
    >>> fig, ax = plt.subplots()
    >>> pos = np.zeros((10, 3, 3)); pos[:, 1, 1] = 1.0; pos[:, 2, 2] = 0.5   # 10 frames
    >>> draw_strip(ax, pos, np.array([-1, 0, 0]), frames=3), len(ax.lines)  # 2 bones each
    (3, 6)
    >>> plt.close(fig)
  """
  positions = np.asarray(positions, np.float64)
  if positions.ndim != 3 or positions.shape[-1] != 3:
    raise ValueError(f"positions must be [T, J, 3], got {positions.shape}")
  t, j, _ = positions.shape
  mask = np.ones(j, bool) if mask is None else np.asarray(mask, bool)
  if parents.shape != (j,) or mask.shape != (j,):
    raise ValueError(f"parents and mask must have shape ({j},)")
  idx = np.unique(np.linspace(0, t - 1, max(1, min(frames, t))).round().astype(int))
  real = positions[:, mask]
  if spacing is None:
    spacing = 1.5 * max(float(np.ptp(real[..., 2])), float(np.ptp(real[..., 1])), 0.1)
  for n, f in enumerate(idx):
    p = positions[f] - [0.0, 0.0, positions[f, 0, 2]]
    dz = n * spacing
    for k in range(1, j):
      if mask[k] and parents[k] >= 0:
        a, b = p[parents[k]], p[k]
        ax.plot([a[2] + dz, b[2] + dz], [a[1] + y_offset, b[1] + y_offset], color=color, lw=1.5,
                label=label if (n == 0 and k == 1) else None)
    ax.scatter(p[mask, 2] + dz, p[mask, 1] + y_offset, s=4, color=color)
  ax.set_aspect("equal")
  ax.set_xticks([])
  return len(idx)

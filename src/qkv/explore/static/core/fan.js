// Knobs that would sit on top of each other fan out around their point, so each stays
// reachable with the mouse (a tether line joins a fanned knob to its true point).

/**
 * Offsets [dx, dy] (px) for knobs at pixel points `tips`: points closer than `grab` px form a
 * group, and a group of m > 1 spreads on a circle of `radius` px around its first point.
 */
export function fanOut(tips, grab = 16, radius = 20) {
  const groups = [];
  const offsets = tips.map(() => [0, 0]);
  tips.forEach(([x, y], i) => {
    const group = groups.find((g) => Math.hypot(g.x - x, g.y - y) < grab);
    if (group) group.members.push(i);
    else groups.push({ x, y, members: [i] });
  });
  for (const { x, y, members } of groups) {
    const m = members.length;
    if (m < 2) continue;
    members.forEach((i, k) => {
      const angle = -Math.PI / 2 + (2 * Math.PI * k) / m;
      // around the group's point: the knob's own tip may be a few px from it
      offsets[i] = [x + radius * Math.cos(angle) - tips[i][0], y + radius * Math.sin(angle) - tips[i][1]];
    });
  }
  return offsets;
}

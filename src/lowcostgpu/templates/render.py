"""Template `render`: frames of a small NumPy ray tracer, each frame written exactly once.

A few spheres on a checkered floor, lit by one sun with hard shadows; the camera orbits the
scene over the frames. Every frame is committed through `sdk.batch`, so an interrupted job
resumes at the first frame not yet durable and the frames are byte-identical to an
uninterrupted render. Output: $LOWCOSTGPU_VOLUME/frames/frame_00000.png ...

    python -m lowcostgpu.templates.render --frames 48 --width 160 --height 120
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from lowcostgpu.sdk.batch import BatchProgress, fingerprint_of
from lowcostgpu.templates._png import encode_png
from lowcostgpu.templates._runtime import EXIT_INTERRUPTED, exit_now, say, start_workload

Array = NDArray[np.float64]
SUN = np.array([-0.5, 1.0, -0.3]) / np.linalg.norm([-0.5, 1.0, -0.3])
FAR = 1e9


@dataclass(frozen=True)
class Scene:
    centers: Array  # (n, 3)
    radii: Array  # (n,)
    colors: Array  # (n, 3)


def make_scene(seed: int, spheres: int) -> Scene:
    rng = np.random.default_rng(seed)
    radii = rng.uniform(0.4, 0.9, spheres)
    angles = np.linspace(0, 2 * np.pi, spheres, endpoint=False) + rng.uniform(0, 0.5, spheres)
    distance = rng.uniform(0.8, 2.2, spheres)
    centers = np.stack([distance * np.cos(angles), radii, distance * np.sin(angles)], axis=1)
    return Scene(centers, radii, rng.uniform(0.2, 1.0, (spheres, 3)))


def camera_rays(frame: int, frames: int, width: int, height: int) -> tuple[Array, Array]:
    theta = 2 * np.pi * frame / frames
    origin = np.array([6.0 * np.cos(theta), 2.0, 6.0 * np.sin(theta)])
    forward = -origin / np.linalg.norm(origin)
    right = np.cross(forward, [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, forward)
    xs = (np.arange(width) + 0.5) / width * 2 - 1
    ys = 1 - (np.arange(height) + 0.5) / height * 2
    px, py = np.meshgrid(xs * width / height * 0.6, ys * 0.6)
    dirs = forward + px[..., None] * right + py[..., None] * up
    dirs = dirs.reshape(-1, 3)
    return origin, dirs / np.linalg.norm(dirs, axis=1, keepdims=True)


def hit_spheres(origins: Array, dirs: Array, scene: Scene) -> tuple[Array, NDArray[np.intp]]:
    """Nearest positive hit distance per ray (FAR if none) and the sphere index."""
    oc = origins[:, None, :] - scene.centers[None, :, :]  # (rays, n, 3)
    b = np.einsum("rnk,rk->rn", oc, dirs)
    c = np.einsum("rnk,rnk->rn", oc, oc) - scene.radii[None, :] ** 2
    disc = b * b - c
    root = np.sqrt(np.maximum(disc, 0.0))
    t = np.where(-b - root > 1e-6, -b - root, -b + root)
    t = np.where((disc > 0) & (t > 1e-6), t, FAR)
    index = np.argmin(t, axis=1)
    return t[np.arange(len(t)), index], index


def render(scene: Scene, frame: int, frames: int, width: int, height: int) -> NDArray[np.uint8]:
    origin, dirs = camera_rays(frame, frames, width, height)
    origins = np.broadcast_to(origin, dirs.shape)
    t_sphere, which = hit_spheres(origins, dirs, scene)
    t_floor = np.where(dirs[:, 1] < -1e-9, -origin[1] / np.minimum(dirs[:, 1], -1e-9), FAR)
    t = np.minimum(t_sphere, t_floor)
    points = origins + t[:, None] * dirs
    on_sphere = t_sphere < t_floor
    normals = np.where(on_sphere[:, None], points - scene.centers[which], np.array([0.0, 1.0, 0.0]))
    normals /= np.linalg.norm(normals, axis=1, keepdims=True)
    checker = (np.floor(points[:, 0]) + np.floor(points[:, 2])) % 2
    floor_color = np.where(checker[:, None] > 0, 0.85, 0.35) * np.ones(3)
    albedo = np.where(on_sphere[:, None], scene.colors[which], floor_color)
    shadow_t, _ = hit_spheres(points + 1e-4 * normals, np.broadcast_to(SUN, points.shape), scene)
    lit = (shadow_t >= FAR) * np.clip(normals @ SUN, 0.0, 1.0)
    color = albedo * (0.15 + 0.85 * lit[:, None])
    sky = np.array([0.55, 0.7, 0.95]) * (0.6 + 0.4 * np.clip(dirs[:, 1:2], 0, 1))
    color = np.where((t < FAR)[:, None], color, sky)
    pixels = np.round(np.clip(color, 0.0, 1.0) ** (1 / 2.2) * 255).astype(np.uint8)
    return pixels.reshape(height, width, 3)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m lowcostgpu.templates.render")
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--width", type=int, default=96)
    parser.add_argument("--height", type=int, default=72)
    parser.add_argument("--spheres", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--frame-delay-s", type=float, default=0.0, help="slow down (demos)")
    args = parser.parse_args(argv)
    if min(args.frames, args.width, args.height, args.spheres) < 1:
        parser.error("--frames, --width, --height and --spheres must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    work = start_workload()
    scene = make_scene(args.seed, args.spheres)
    settings = f"{args.frames}:{args.width}x{args.height}:{args.spheres}:{args.seed}"
    progress = BatchProgress(
        work.volume / "frames",
        fingerprint=fingerprint_of("render", settings),
        metadata=work.metadata,
        notice=work.notice,
    )
    if progress.done_count:
        say(f"resumed at item {progress.done_count} (restart {work.env.restart_count})")
    for frame in range(args.frames):
        key = f"frame-{frame}"
        if progress.is_done(key):
            continue
        if progress.should_stop():
            progress.report()
            say(f"checkpoint step {progress.done_count} on volume")
            return EXIT_INTERRUPTED
        image = render(scene, frame, args.frames, args.width, args.height)
        progress.commit(key, {f"frame_{frame:05d}.png": encode_png(image)})
        say(f"frame {frame} written")
        if args.frame_delay_s:
            work.notice.wait(args.frame_delay_s)
    progress.finish()
    say(f"done: {args.frames} frames in {progress.directory}")
    return 0


if __name__ == "__main__":
    exit_now(main())

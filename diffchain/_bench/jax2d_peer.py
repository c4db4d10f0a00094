"""Jax2D peer of the benchmark: diffchain's pinned pendulum of point masses built in Jax2D 1.0.2 (the 2D engine of
Kinetix; the ``jax2d`` extra: Jax2D imports ``chex`` without declaring it). Usage::

    p = jax2d_pendulum(5)                                   # float32, with jax_enable_x64 on or off
    states = p.from_joint_angles(theta)                     # theta (B, 5): a batch of scenes at rest
    final = jax.jit(p.run, static_argnums=1)(states, 100)   # vmap over the batch of a lax.scan of 100 engine steps
    p.joint_angles(final), p.joint_points(final)            # (B, 5) and (B, 6, 2), diffchain's conventions

How the model differs from ``dc.pendulum(n_links, mass=1.0, length=1.0)`` (1 kg at the tip of each massless 1 m
link, point 1 pinned at the origin, g = 9.81 along -y, no input, no contacts):

* Bodies. Jax2D has neither point masses nor massless bodies, so each link is one rigid body of 1 kg whose centre of
  mass is the link's tip and whose inertia about it is ``tip_inertia`` = 1e-3 kg m^2 (set in the state: inverse
  mass 1, inverse inertia 1000); about the joint, 1.001 kg m^2 instead of 1. Smaller inertias break Jax2D's solver
  (3-link chain over 1 s from 64 random starts: the links stretch by 3 % at 3e-4, NaN in 25 copies at 2e-4). The
  1 m x 2 cm rectangle only draws the link.
* Joints. A fixed circle at the origin (a second, inactive one far away: Jax2D needs two, and two at one point make
  every gradient NaN) and revolute joints from each body's tip to the next body's base. Jax2D's joints are soft:
  under-relaxed impulses (stiffness 0.6) with Baumgarte velocity (2.0) and position (0.7) corrections, 10 solver
  iterations, warm starting; the links stretch. No collisions (jointed bodies never collide; the engine still
  computes the manifolds). State clipping raised to 1e6.
* Steps. One ``PhysicsEngine.step`` per dt, semi-implicit Euler, no substeps.

Measured (2-core CPU, one start with angles uniform in [-pi, pi], seed 0, at rest, against diffchain's RK4 in
float64): after 1 s the 3-link chain's angles differ by 0.057 rad (float32; 0.047 in float64; diffchain's own
semi-implicit Euler differs from its RK4 by 0.011 rad, the tip inertia alone makes 0.005), its links stretch by
7e-5; the 5-link chain's by 0.078 rad and 9e-5. After 0.2 s, 8 starts: 0.6e-3 to 1.1e-3 rad
(tests/bench/test_jax2d_peer.py, which a wrong mass, length or g fails). 5 links, float32, 1024 x 100 steps:
1.4e4 copy-steps/s, compile 7.3 s.

Gradients: ``jax.grad`` runs through the step (``loss``, :func:`position_gradient`) and agrees with a central
difference after one step, but grows about 2000-fold per step at this inertia (with one solver iteration, or a tip
inertia near 1 kg m^2, it stays O(1)): inf or NaN in float32 after about 14 steps, NaN at 100. 5 links, 128 x 100:
gradient / forward 4.4, compile 36 s, 4.3 GB of memory (1024 copies do not fit in 23 GB).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .timing import _timed

TIP_INERTIA = 1e-3      # kg m^2, each body's moment of inertia about its centre of mass (the link's tip)
LINK_WIDTH = 0.02       # m, the drawn rectangle (no collisions: it has no effect on the motion)
ANCHOR_RADIUS = 0.05    # m, the fixed circle at the pin
SPARE_CIRCLE = (0.0, 100.0)


class Jax2DPendulum(NamedTuple):
    """What :func:`jax2d_pendulum` returns; ``B`` is any batch shape (``run`` and ``loss``: one batch axis)."""
    from_joint_angles: Callable  # theta (B..., n_links) -> SimState with leading axes B..., at rest
    run: Callable                # (states, T) -> the states after T engine steps (T a Python int: static under jit)
    joint_angles: Callable       # states -> (B..., n_links) relative joint angles in [-pi, pi)
    joint_points: Callable       # states -> (B..., n_links + 1, 2) points 1..n (point 1: the pin at the origin)
    loss: Callable               # (states, T) -> sum of squares of the final body positions and velocities
    engine: object               # jax2d.engine.PhysicsEngine
    sim_params: object           # jax2d.sim_state.SimParams
    static_sim_params: object    # jax2d.sim_state.StaticSimParams


def _cast(tree, dtype):
    return jax.tree_util.tree_map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a, tree)


def jax2d_pendulum(n_links: int, dt: float = 1e-3, dtype=jnp.float32, tip_inertia: float = TIP_INERTIA,
                   num_solver_iterations: int = 10) -> Jax2DPendulum:
    """Diffchain's ``dc.pendulum(n_links, mass=1.0, length=1.0)`` as a Jax2D scene (see the module docstring for
    how it differs). ``dtype`` float32 (default) or float64; the programs trace Jax2D under a ``jax.enable_x64``
    matching ``dtype`` (Jax2D mixes float32 arrays with Python scalars), so they work whether the global
    ``jax_enable_x64`` is on or off (float64 needs it on: traced inside an x64-off jit, the float64 program fails in
    JAX). ``num_solver_iterations`` = 10 is Jax2D's default."""
    from jax2d.engine import PhysicsEngine, create_empty_sim
    from jax2d.scene import (
        add_circle_to_scene,
        add_rectangle_to_scene,
        add_revolute_joint_to_scene,
    )
    from jax2d.sim_state import SimParams, StaticSimParams

    n = int(n_links)
    dtype = jnp.dtype(dtype)
    x64 = dtype == jnp.float64
    if x64 and not jax.config.jax_enable_x64:
        raise ValueError("dtype float64 needs jax_enable_x64 on (Jax2D's float32 programs do not)")
    static = StaticSimParams(num_polygons=n, num_circles=2, num_joints=n, num_thrusters=1,
                             num_static_fixated_polys=0, num_solver_iterations=num_solver_iterations)
    params = SimParams(dt=dt, clip_position=1e6, clip_velocity=1e6, clip_angular_velocity=1e6)
    with jax.enable_x64(False):  # Jax2D builds its engine (int32 index tables) and scenes (float32) without x64
        engine = PhysicsEngine(static)
        sim = create_empty_sim(static, add_floor=False, add_walls_and_ceiling=False)
        sim, (_, anchor) = add_circle_to_scene(sim, static, jnp.zeros(2), ANCHOR_RADIUS, velocity=jnp.zeros(2),
                                               fixated=True)
        for k in range(n):
            sim, _ = add_rectangle_to_scene(sim, static, jnp.array([k + 0.5, 0.0]), jnp.array([1.0, LINK_WIDTH]),
                                            velocity=jnp.zeros(2))
        tip, base = jnp.zeros(2), jnp.array([-1.0, 0.0])  # body frame: centre of mass at the tip, base 1 m behind
        for k in range(n):
            sim, _ = add_revolute_joint_to_scene(sim, static, anchor if k == 0 else k - 1, k, tip, base)
        w = LINK_WIDTH / 2
        rectangle = jnp.array([[-1.0, w], [0.0, w], [0.0, -w], [-1.0, -w]])  # clockwise from the top left
        sim = sim.replace(
            polygon=sim.polygon.replace(vertices=jnp.broadcast_to(rectangle, (n, 4, 2)), inverse_mass=jnp.ones(n),
                                        inverse_inertia=jnp.full(n, 1.0 / tip_inertia)),
            circle=sim.circle.replace(position=sim.circle.position.at[1].set(jnp.array(SPARE_CIRCLE))))
    with jax.enable_x64(x64):
        template = _cast(sim, dtype)
        actions = jnp.zeros(static.num_joints + static.num_thrusters, dtype)

    def from_joint_angles(theta):
        with jax.enable_x64(x64):
            theta = jnp.asarray(theta, dtype)
            phi = jnp.cumsum(theta, -1)
            tips = jnp.cumsum(jnp.stack([jnp.cos(phi), jnp.sin(phi)], -1), -2)  # points 2..n, links of 1 m

            def one(phi, tips):
                return template.replace(polygon=template.polygon.replace(position=tips, rotation=phi))

            for _ in range(theta.ndim - 1):
                one = jax.vmap(one)
            return one(phi, tips)

    def run(states, T):
        with jax.enable_x64(x64):
            def rollout(s):
                return jax.lax.scan(lambda s, _: (engine.step(s, params, actions)[0], None), s, None, length=T)[0]
            return jax.vmap(rollout)(states)

    def joint_points(states):
        return jnp.concatenate([states.circle.position[..., :1, :], states.polygon.position], -2)

    def joint_angles(states):
        phi = states.polygon.rotation
        theta = jnp.diff(phi, axis=-1, prepend=jnp.zeros_like(phi[..., :1]))
        return jnp.mod(theta + jnp.pi, 2 * jnp.pi) - jnp.pi

    def loss(states, T):
        final = run(states, T)
        return jnp.sum(final.polygon.position ** 2) + jnp.sum(final.polygon.velocity ** 2)

    return Jax2DPendulum(from_joint_angles, run, joint_angles, joint_points, loss, engine, params, static)


def position_gradient(p: Jax2DPendulum):
    """``(states, T) -> d loss / d (starting body positions)``, shaped like ``states.polygon.position``."""
    def grad(states, T):
        def f(pos):
            return p.loss(states.replace(polygon=states.polygon.replace(position=pos)), T)
        return jax.grad(f)(states.polygon.position)
    return grad


def _wrap(d):
    return np.abs((np.asarray(d) + np.pi) % (2 * np.pi) - np.pi)


def link_stretch(points):
    """max |link length / 1 m - 1| over the chains of ``points`` (..., n_links + 1, 2)."""
    points = np.asarray(points, np.float64)
    return float(np.abs(np.linalg.norm(np.diff(points, axis=-2), axis=-1) - 1.0).max())


def accuracy(n_links, n_steps=1000, dtype=jnp.float32, seed=0):
    """(max |link length / 1 m - 1|, max |joint angle - diffchain RK4's|) after ``n_steps`` steps of 1 ms from one
    start (angles uniform in [-pi, pi], ``seed``, at rest); the reference in float64 (needs jax_enable_x64)."""
    import diffchain as dc

    theta = np.random.default_rng(seed).uniform(-np.pi, np.pi, n_links)
    chain = dc.pendulum(n_links, mass=1.0, length=1.0)
    ref = jax.jit(lambda s: dc.rollout(chain, s, None, 1e-3, n_steps=n_steps, integrator=dc.RK4())[0])(
        dc.from_joint_angles(chain, jnp.asarray(theta, jnp.float64)))
    p = jax2d_pendulum(n_links, dtype=dtype)
    final = jax.jit(p.run, static_argnums=1)(p.from_joint_angles(theta[None]), n_steps)
    difference = _wrap(np.asarray(p.joint_angles(final))[0] - np.asarray(dc.joint_angles(ref)))
    return link_stretch(p.joint_points(final)), float(difference.max())


def throughput(n_links=5, B=1024, T=100, gradient=False, seed=0, repeats=3):
    """float32 forward copy-steps per second, compile seconds and the largest link stretch (max |link / 1 m - 1|)
    at the end of the rollouts; with ``gradient``, also the gradient's seconds per call / the forward's, and its
    compile seconds. Timing as in the suite (:mod:`diffchain._bench.timing`): after compiling, a first call of over 1 s is the
    measurement, else the median of ``repeats`` calls."""
    p = jax2d_pendulum(n_links)
    states = p.from_joint_angles(np.random.default_rng(seed).uniform(-np.pi, np.pi, (B, n_links)))
    run = jax.jit(p.run, static_argnums=1)
    fwd, c_fwd = _timed(lambda s: run(s, T), (states,), repeats)
    out = {"copy_steps_per_s": B * T / fwd, "compile_s": c_fwd, "stretch": link_stretch(p.joint_points(run(states, T)))}
    if gradient:
        grad, c_grad = _timed(lambda s: position_gradient(p)(s, T), (states,), repeats)
        out.update(gradient_over_forward=grad / fwd, gradient_compile_s=c_grad)
    return out


if __name__ == "__main__":
    jax.config.update("jax_enable_x64", True)
    for n, dtype, steps in ((3, jnp.float32, 1000), (3, jnp.float64, 1000), (5, jnp.float32, 1000),
                            (3, jnp.float32, 200)):
        print(f"{n} links {jnp.dtype(dtype).name}, {steps} steps: (max link stretch, max joint angle difference) =",
              accuracy(n, n_steps=steps, dtype=dtype), flush=True)
    print("5 links float32, 1024 x 100:", throughput(5), flush=True)
    print("5 links float32, 128 x 100, with the gradient:", throughput(5, B=128, gradient=True), flush=True)

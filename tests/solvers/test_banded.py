"""The sparse method (dc.Banded, O(n)) on a closed chain equals the dense KKT solve of the same loop."""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import MechanismBuilder


def hanging_chain(n, rng):
    """A sagging chain of n masses between anchors (0, 0) and (n*0.8, 0): rods of length 1 joining slightly
    perturbed points (the lengths are taken as drawn, so the state is exactly on the constraints)."""
    xs = np.linspace(0.0, 0.8 * (n + 1), n + 2)
    ys = -0.9 * np.sin(np.pi * np.arange(n + 2) / (n + 1)) * (n + 1) / 4 + np.r_[0, rng.normal(0, 0.05, n), 0]
    P = np.stack([xs, ys], 1)
    return P, np.linalg.norm(P[1:] - P[:-1], axis=1)


@pytest.mark.slow
def test_banded_closed_chain_equals_dense_kkt():
    """A chain of n masses pinned at both ends (a loop through the ground), solved by the sparse method (Banded):
    its accelerations and rod tensions under random point forces on the masses equal the dense KKT solve of the same
    loop built as a mechanism under the same forces (rods as
    distance rows, the multipliers being the tensions on the constraints), and the chain's own dense KKT solve with
    the PD correction on and velocities off the constraints, values and gradients."""
    rng = np.random.default_rng(5)
    n = 7
    P, l = hanging_chain(n, rng)
    m = rng.uniform(0.5, 2.0, n)
    mb = MechanismBuilder()
    mb.ground("a", P[0]), mb.ground("b", P[-1])
    names = ["a"] + [mb.point(f"p{k}", P[k + 1], mass=m[k]) for k in range(n)] + ["b"]
    for k in range(n + 1):
        mb.rod(f"rod{k}", names[k], names[k + 1])
    mech, s = mb.build()
    # velocities on the constraints (J v = 0): there the chain's rod rows and the mechanism's distance rows have the
    # same velocity terms (off them the chain keeps |dv_perp|^2 / |d|, the mechanism |dv|^2 / l)
    s, _ = eqx.filter_jit(dc.velocity_analysis)(mech, dc.State(s.x, jnp.asarray(rng.normal(0, 1, (n, 2))), 0.0))
    v = s.v
    # point forces on the masses: the mechanism's in the order of its point_names (the grounds first)
    F = jnp.asarray(rng.normal(0, 2.0, (n, 2)))
    ref = eqx.filter_jit(dc.forward_dynamics)(mech, s, dc.Control(tau=jnp.zeros(0), F=jnp.pad(F, ((2, 0), (0, 0)))),
                                              solver=dc.KKT(), return_forces=True)
    assert int(ref.info.mobility) == 2 * n - (n + 1)
    chain = dc.Chain(np.r_[1.0, m, 1.0], l, guided=np.r_[True, np.zeros(n, bool), True])
    state = dc.State(jnp.asarray(P), jnp.concatenate([jnp.zeros((1, 2)), v, jnp.zeros((1, 2))]))
    control = dc.Control(F=jnp.pad(F, ((1, 1), (0, 0))))
    solve = jax.jit(lambda s, solver, stab=None: dc.forward_dynamics(chain, s, control, solver=solver, stab=stab,
                                                                     return_forces=True), static_argnums=1)
    sol = solve(state, dc.Banded())
    np.testing.assert_allclose(sol.a[1:-1], ref.a, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(np.asarray(sol.a)[[0, -1]], 0.0, atol=0)
    np.testing.assert_allclose(sol.forces, ref.forces, rtol=1e-10, atol=1e-10)
    state = dc.State(state.x, state.v + jnp.asarray(rng.normal(0, 0.1, state.v.shape)).at[jnp.array([0, -1])].set(0.0))
    banded, kkt = solve(state, dc.Banded(), 0.1), solve(state, dc.KKT(), 0.1)
    np.testing.assert_allclose(banded.a, kkt.a, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(banded.forces, kkt.forces, rtol=1e-10, atol=1e-10)
    grad = lambda solver: jax.grad(lambda x: jnp.sum(solve(dc.State(x, state.v), solver, 0.1).a ** 2))(state.x)  # noqa
    np.testing.assert_allclose(grad(dc.Banded()), grad(dc.KKT()), rtol=1e-9, atol=1e-9)

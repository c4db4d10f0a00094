"""The O(n) banded closed-chain solver equals the dense KKT solve of the same chain built as a Mechanism."""
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import diffchain as dc
from diffchain._solvers import mechanism as ms
from diffchain._solvers.closed_chain import closed_chain_dynamics
from diffchain import MechanismBuilder


def hanging_chain(n, rng):
    """A sagging chain of n masses between anchors (0, 0) and (n*0.8, 0): rods of length 1 joining slightly
    perturbed points (the lengths are taken as drawn, so the state is exactly on the constraints)."""
    xs = np.linspace(0.0, 0.8 * (n + 1), n + 2)
    ys = -0.9 * np.sin(np.pi * np.arange(n + 2) / (n + 1)) * (n + 1) / 4 + np.r_[0, rng.normal(0, 0.05, n), 0]
    P = np.stack([xs, ys], 1)
    return P, np.linalg.norm(P[1:] - P[:-1], axis=1)


def test_banded_closed_chain_equals_dense_kkt():
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
    s = dc.State(s.x, jnp.asarray(rng.normal(0, 1, (n, 2))), 0.0)
    for stab in (None, 0.1):
        ref = eqx.filter_jit(ms.mechanism_dynamics)(mech, s, solver=dc.KKT(), stab=stab)
        a_ref, lam_ref = ref.a, ref.forces
        assert int(ref.info.mobility) == 2 * n - (n + 1)
        a, lam = jax.jit(closed_chain_dynamics, static_argnames="stab")(jnp.asarray(m), jnp.asarray(l), P[0], P[-1],
                                                                      s, stab=stab)
        np.testing.assert_allclose(a, a_ref, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(lam, lam_ref, rtol=1e-10, atol=1e-10)

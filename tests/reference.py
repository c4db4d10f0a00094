"""Reference schemes written out with diffchain.forward_dynamics, for tests that check an integrator against them."""
import jax
import jax.numpy as jnp

import diffchain as dc


def verlet_reference(chain, state, controls, dt, n_steps, stab):
    """Velocity Verlet as the event rollout takes it between events: x' = x + h v + h^2 a / 2, a' = a(x', v + h a),
    v' = v + h (a + a') / 2, and a' is the next step's a while the control stays (one call per step); a step whose
    control differs from the last one's starts with a call at its start. ``controls``: a stacked Control or None."""
    if controls is None:
        controls = dc.Control(n=chain.n, dtype=state.x.dtype)
        controls = jax.tree.map(lambda c: jnp.broadcast_to(c, (n_steps,) + c.shape), controls)

    def accel(s, u):
        return dc.forward_dynamics(chain, s, u, stab=stab)

    def step(carry, u):
        s, a, u_prev = carry
        same = jax.tree.reduce(lambda p, q: p & q, jax.tree.map(lambda p, q: jnp.all(p == q), u, u_prev))
        a = jax.lax.cond(same, lambda: a, lambda: accel(s, u))
        x1 = s.x + dt * s.v + 0.5 * dt**2 * a
        a1 = accel(dc.State(x1, s.v + dt * a, s.t + dt), u)
        s1 = dc.State(x1, s.v + 0.5 * dt * (a + a1), s.t + dt)
        return (s1, a1, u), s1

    u0 = jax.tree.map(lambda c: c[0], controls)
    return jax.lax.scan(step, (state, accel(state, u0), u0), controls)[1]

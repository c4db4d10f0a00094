"""Reverse mode of the point-major batched rollout (:mod:`diffchain._xla.point_major`): :func:`lean_rollout_vjp`.

The tensions' solve is differentiated implicitly (its transposed system is the same symmetric tridiagonal one, so the
adjoint multipliers cost one more Thomas solve with the forward's factors); the local terms' adjoint is written by hand
on point-major arrays, a policy's by its own ``jax.vjp`` at each step; the steps run backward block by block from
recomputed states, and only the cotangents that reverse mode asks for are computed.
"""
from __future__ import annotations


import jax
import jax.numpy as jnp

from .._model.forces import _speed
from .._simulate.integrators import RK4, SeedQuantum, SemiImplicitEuler
from .._model.model import Model
from .._state import Control, State
from .point_major import (_block, _input_block, _input_rows, _pivot_tol, _runtime, _solve,
                          _time_block, _to_points, adjoint_terms)


ADJOINT_ALPHA = {SeedQuantum: 0.5, SemiImplicitEuler: 1.0, RK4: None}  # the integrators with an adjoint:


# alpha / dt^2 of the one-acceleration steps
CHAIN_FIELDS = ("m", "l", "g", "k_omega", "k_v", "s", "c")  # the chain's arrays with a cotangent (s, c: sliders)


INPUT_FIELDS = ("tau", "F", "a_w")


def acceleration_adjoint(t, abx, aby, w):
    """The cotangents of (X, Y, U, V), of the inputs (tau, F_x, F_y, a^w_x, a^w_y) and of the chain's (m, l, g,
    k_omega, k_v; with sliders s and c too) for the cotangent abar of the accelerations, from :func:`adjoint_terms`
    ``t`` (implicit differentiation of the tensions' solve). The residuals R_i = P_i G_i / m_i + a0_i - a_i of the
    points and R_k = d_k^T (a_k - a_{k+1}) - E_k of the rods vanish; their transposed system has the same
    tridiagonal matrix (S is symmetric, and a rod with a vanishing pivot drops out alike), so nu is one more solve
    with the forward's factors, mu_i = -abar_i + d_i nu_i - d_{i-1} nu_{i-1}, and the inputs' cotangent is that of
    -(mu . R + nu . R_rods) at fixed (a, psi), through the local terms (E_k, the torques' point forces, gravity;
    P_i and a0_i of a point on a line) by hand."""
    dx, dy, du, dv, weighted = t.dx, t.dy, t.du, t.dv, t.weighted
    Qax, Qay = weighted(abx, aby)
    rhs = -(dx * (Qax[:-1] - Qax[1:]) + dy * (Qay[:-1] - Qay[1:]))
    nu = jnp.stack(_solve(t.factors, list(t.off), list(rhs)))
    mux, muy = -abx - _to_points(dx * nu), -aby - _to_points(dy * nu)
    Fbx, Fby = weighted(mux, muy)
    Fbx, Fby = -Fbx, -Fby  # the applied forces' cotangent, -P mu / m
    fbx, fby = Fbx[:-1] - Fbx[1:], Fby[:-1] - Fby[1:]  # ... of the torques' force on each rod
    dtau_bar = -dy * fbx + dx * fby
    inv_sq, rho, ddv, dtau, psi, w2 = t.inv_sq, t.rho, t.ddv, t.dtau, t.psi, w * w
    ddv_bar = nu * (2.0 * w - 2.0 * ddv * inv_sq)  # E_k's cotangent is nu_k
    inv_sq_bar = dtau_bar * (t.tau[1:] - t.tau[:-1]) - nu * ddv * ddv
    tau_bar = _to_points(dtau_bar * inv_sq)  # of the torques (the input's, and the damping torques')
    cross = dx * dv - dy * du  # w_k rho_k^2
    if t.kw is not None:  # damping: -k_omega omega^z in the torques, omega^z_i = w_i - w_{i-1}, w_k = cross_k / rho_k^2
        oz_bar = -t.kw * tau_bar
        w_bar = oz_bar[:-1] - oz_bar[1:]
        inv_sq_bar = inv_sq_bar + w_bar * cross
    half_inv_rho = jnp.where(t.pos, 0.5 / jnp.where(t.pos, rho, 1.0), 0.0)
    sq_bar = nu * w2 - inv_sq * inv_sq * inv_sq_bar - nu * t.l * w2 * half_inv_rho
    Dx = psi * (Fbx[1:] - Fbx[:-1]) - nu * (t.ax[:-1] - t.ax[1:])
    Dy = psi * (Fby[1:] - Fby[:-1]) - nu * (t.ay[:-1] - t.ay[1:])
    Dx = Dx + dtau * fby + ddv_bar * du + 2.0 * dx * sq_bar
    Dy = Dy - dtau * fbx + ddv_bar * dv + 2.0 * dy * sq_bar
    Du, Dv = 2.0 * nu * du + ddv_bar * dx, 2.0 * nu * dv + ddv_bar * dy
    if t.kw is not None:
        Dx, Dy = Dx + w_bar * dv * inv_sq, Dy - w_bar * du * inv_sq
        Du, Dv = Du - w_bar * dy * inv_sq, Dv + w_bar * dx * inv_sq
    rows = [_to_points(Dx), _to_points(Dy), _to_points(Du), _to_points(Dv)]
    inputs = (tau_bar, Fbx, Fby, jnp.where(t.guided, -mux, 0.0), jnp.where(t.guided, -muy, 0.0))
    # the chain: a_i = P_i G_i / m_i (-> mu . P G / m^2 = -Fbar . G / m), gravity -g m_i, rho_k l_k w^2 in E_k;
    # damping and drag (zero on the chains without them, not their derivatives): tau_i - k_omega_i omega^z_i,
    # F_i - k_v_i |v_i| v_i
    m_bar = -(Fbx * t.Gx + Fby * t.Gy) / t.m - t.g * Fby
    omega_z = -_to_points(cross * inv_sq)
    U, V = t.U, t.V
    speed = _speed(U, V)
    chain = dict(m=m_bar, l=-nu * rho * w2, g=-t.m * Fby, k_omega=-omega_z * tau_bar,
                 k_v=-speed * (U * Fbx + V * Fby))
    if t.kv is not None:  # drag: d(|v| v)/dv = |v| I + v v^T / |v| (0 at v = 0)
        vF = (U * Fbx + V * Fby) * jnp.where(speed > 0, 1.0 / jnp.where(speed > 0, speed, 1.0), 0.0)
        rows[2] = rows[2] - t.kv * (speed * Fbx + U * vF)
        rows[3] = rows[3] - t.kv * (speed * Fby + V * vF)
    if t.sx is not None:  # a point on a line: P = I - s s^T / q and a0 = s beta / q (q = |s|^2), beta of (s, c, x, v)
        sx, sy, inv_q, beta, m = t.sx, t.sy, t.inv_q, t.beta, t.m
        mu_s = (mux * sx + muy * sy) * inv_q  # (mu . s) / q; the cotangent of a0 is -mu
        G_s = (t.Gx * sx + t.Gy * sy) * inv_q
        beta_bar = -mu_s
        # s through P (P_bar = -mu G^T / m), through a0 = s beta / q and through beta = -(s.x - c) w^2 - 2 (s.v) w
        k = 2.0 * mu_s * (beta * inv_q - G_s / m)  # the coefficient of s
        s_bar = [(mu * G_s + G * mu_s) / m - beta * mu * inv_q + k * s_ + beta_bar * (-w2 * x - 2.0 * w * v)
                 for mu, G, s_, x, v in ((mux, t.Gx, sx, t.X, U), (muy, t.Gy, sy, t.Y, V))]
        on = t.on
        chain.update(s=tuple(jnp.where(on, q, 0.0) for q in s_bar), c=jnp.where(on, beta_bar * w2, 0.0))
        rows[0] = rows[0] - jnp.where(on, beta_bar * w2 * sx, 0.0)
        rows[1] = rows[1] - jnp.where(on, beta_bar * w2 * sy, 0.0)
        rows[2] = rows[2] - jnp.where(on, beta_bar * 2.0 * w * sx, 0.0)
        rows[3] = rows[3] - jnp.where(on, beta_bar * 2.0 * w * sy, 0.0)
    return tuple(rows), inputs, chain


def lean_rollout_vjp(axis_size, in_batched, chain: Model, state: State, controls, cotangents, *, dt, n_steps,
                     integrator, starts, policy=None, kind=0, chain_wanted=CHAIN_FIELDS,
                     inputs_wanted=INPUT_FIELDS):
    """The cotangents of (``chain``, ``state``, ``controls``) of :func:`lean_rollout` (``kind`` as there; an
    integrator of ``ADJOINT_ALPHA``) for the ``cotangents`` of its outputs, ((x, v, t) of the final state, (x, v, t)
    of the trajectory), None where zero. From the states at the start of each block of K steps (:func:`_block`;
    ``starts`` = their (x, v, t), (B, T/K, n, 2), (B, T/K, n, 2), (B, T/K), kept by :func:`lean_rollout`), block by
    block from the last, the K states are recomputed (in cache) and the steps run backward
    (:func:`acceleration_adjoint`): reading a stored trajectory moves more memory than recomputing it.

    ``controls`` are open-loop inputs (a :class:`~diffchain.Control` with a time axis) or None, or with a
    ``policy(controls, state) -> Control`` (one chain's, as in :func:`lean_rollout`) the policy's arguments (a list):
    each step then pulls the inputs' cotangent back through the policy (``jax.vjp`` of its ``vmap``) into the
    state's cotangent and those of its arguments.

    Returns each element's cotangents, batch first, also of inputs that the batch shares: the chain's as a dict by
    field (those of ``chain_wanted``, a subset of m, l, g, k_omega, k_v, and with sliders s, c), the state's (x, v,
    t) and the inputs' ((tau, F, a^w) open loop, a list by argument with a policy; None where not in
    ``inputs_wanted``, the field names or argument indices), None without inputs. What is not wanted is not
    computed (a gradient with respect to the open-loop inputs alone: 1/3 less work per reverse step than with
    everything)."""
    n, b_controls, dtype = state.x.shape[-2], in_batched[2], state.x.dtype  # (the state: its start is in starts)
    chain = _runtime(chain)
    rk4 = ADJOINT_ALPHA[type(integrator)] is None
    alpha = None if rk4 else ADJOINT_ALPHA[type(integrator)] * dt * dt
    stab = integrator.stab(dt)
    w = 0.0 if stab is None else 1.0 / stab
    tol = _pivot_tol(state.x.dtype)
    ct_final, ct_traj = cotangents
    T = controls.tau.shape[-2] if controls is not None and policy is None else n_steps
    K = _block(T)
    no_input = controls is None and policy is None
    if no_input:  # zero inputs, shared
        controls = Control(tau=jnp.zeros((T, n), dtype), F=jnp.zeros((T, n, 2), dtype),
                           a_w=jnp.zeros((T, n, 2), dtype))
        b_controls = jax.tree.map(lambda _: False, controls)
    rows = lambda q: (q[..., 0, :], q[..., 1, :])  # noqa: E731  (K, n, 2, B) -> x and y rows (K, n, B)
    pts = lambda X, Y: jnp.stack([X.T, Y.T], -1)  # noqa: E731  rows -> (B, n, 2)
    field = lambda q, name: None if q is None else q["xvt".index(name)]  # noqa: E731  (None: a zero cotangent)
    if policy is not None:  # its arguments for every element; those differentiated, by index
        consts = [c if b else jnp.broadcast_to(c, (axis_size,) + jnp.shape(c)) for c, b in zip(controls, b_controls)]
        diff = [i for i in range(len(consts)) if i in inputs_wanted]

    def policy_inputs(d, X, Y, U, V, t):  # the policy's inputs by point, (n, B) rows; d: the differentiated arguments
        args = list(consts)
        for i, q in zip(diff, d):
            args[i] = q
        c = jax.vmap(policy)(args, State(pts(X, Y), pts(U, V), t))
        return _input_rows(c)

    def inputs(c):  # the open-loop inputs of block c, (K, n, B) where batched; None with a policy
        return None if policy is not None else _input_block(controls, b_controls, c, K)

    def accel(X, Y, U, V, u):
        return adjoint_terms(chain, X, Y, U, V, u, w, tol, kind)

    def rk4_stages(X, Y, U, V, u):  # RK4's four stage states (x and v by components) and their terms
        h = 0.5 * dt
        stages = [((X, Y), (U, V))]
        terms = [accel(X, Y, U, V, u)]
        for c in (h, h, dt):
            Uq, Vq = stages[-1][1]  # the previous stage's velocity
            a = terms[-1]
            stages.append(((X + c * Uq, Y + c * Vq), (U + c * a.ax, V + c * a.ay)))
            terms.append(accel(*stages[-1][0], *stages[-1][1], u))
        return stages, terms

    def advance(s, u):  # one step forward, point-major
        X, Y, U, V, t = s
        u = policy_inputs([consts[i] for i in diff], X, Y, U, V, t) if policy is not None else u
        if rk4:
            stages, terms = rk4_stages(X, Y, U, V, u)
            wsum = lambda q: (q[0] + 2.0 * q[1] + 2.0 * q[2] + q[3]) * (dt / 6.0)  # noqa: E731
            return (X + wsum([q[1][0] for q in stages]), Y + wsum([q[1][1] for q in stages]),
                    U + wsum([a.ax for a in terms]), V + wsum([a.ay for a in terms]), t + dt), s
        terms = accel(X, Y, U, V, u)
        return (X + dt * U + alpha * terms.ax, Y + dt * V + alpha * terms.ay, U + dt * terms.ax,
                V + dt * terms.ay, t + dt), s

    def step_adjoint(X, Y, U, V, u, bar):  # the step's: (its start's bar, the inputs' bar, the chain's bar)
        xb, yb, ub, vb = bar
        if not rk4:
            (Xa, Ya, Ua, Va), u_bar, ch = acceleration_adjoint(accel(X, Y, U, V, u), alpha * xb + dt * ub,
                                                               alpha * yb + dt * vb, w)
            return (xb + Xa, yb + Ya, dt * xb + ub + Ua, dt * yb + vb + Va), u_bar, ch
        # x' = x + dt/6 (v1 + 2 v2 + 2 v3 + v4), v' = v + dt/6 (a1 + 2 a2 + 2 a3 + a4), stage q+1 at
        # (x + c_q v_q, v + c_q a_q), c = dt/2, dt/2, dt: backward from stage 4
        _, terms = rk4_stages(X, Y, U, V, u)
        weight, c = (1.0, 2.0, 2.0, 1.0), (0.5 * dt, 0.5 * dt, dt)
        start = [xb, yb, ub, vb]  # the cotangent of the step's start, summed over its uses
        vq_bar = [0.0, 0.0]  # of the stage velocity v_q (x and y)
        aq_bar = [0.0, 0.0]  # of the stage acceleration a_q, from the later stage's velocity
        u_bar, ch = None, None
        for q in reversed(range(4)):
            # v_q enters x' (weight w_q dt/6) and stage q+1's position (c_q); a_q: v' and stage q+1's velocity
            vbar = [weight[q] * dt / 6.0 * b + vq for b, vq in zip((xb, yb), vq_bar)]
            abar = [weight[q] * dt / 6.0 * b + aq for b, aq in zip((ub, vb), aq_bar)]
            (Xa, Ya, Ua, Va), uq, chq = acceleration_adjoint(terms[q], abar[0], abar[1], w)
            # stage q's state: x + c_{q-1} v_{q-1}, v + c_{q-1} a_{q-1} (stage 0: the start itself)
            xbar, vbar_state = (Xa, Ya), (Ua + vbar[0], Va + vbar[1])
            start = [start[0] + xbar[0], start[1] + xbar[1], start[2] + vbar_state[0], start[3] + vbar_state[1]]
            if q:
                vq_bar = [c[q - 1] * xbar[0], c[q - 1] * xbar[1]]
                aq_bar = [c[q - 1] * vbar_state[0], c[q - 1] * vbar_state[1]]
            u_bar = uq if u_bar is None else tuple(p + r for p, r in zip(u_bar, uq))
            ch = chq if ch is None else jax.tree.map(jnp.add, ch, chq)
        return tuple(start), u_bar, ch

    def block(carry, c):  # K steps backward, from the state at the block's start (recomputed: checkpointing)
        back, out = carry
        x0, v0, t0 = (jax.lax.dynamic_index_in_dim(q, c, 1, keepdims=False) for q in starts)
        start = (x0[..., 0].T, x0[..., 1].T, v0[..., 0].T, v0[..., 1].T, t0)
        cts = [None if q is None else rows(_time_block(q, True, c, K)) for q in (field(ct_traj, "x"),
                                                                                 field(ct_traj, "v"))]
        u = inputs(c)
        back, u_bar = jax.lax.scan(step, back, (jax.lax.scan(advance, start, u, length=K)[1], u, cts),
                                   reverse=True)
        if policy is None:
            # the inputs' cotangents written batch first block by block: (K, n, B) -> (B, K, n) in cache (moving
            # the time axis of the whole (T/K, K, n, B) afterwards is slower)
            tau, Fx, Fy, awx, awy = (None if q is None else jnp.moveaxis(q, -1, 0) for q in u_bar)
            new = dict(tau=tau, F=None if Fx is None else jnp.stack([Fx, Fy], -1),
                       a_w=None if awx is None else jnp.stack([awx, awy], -1))
            out = {k: jax.lax.dynamic_update_slice_in_dim(q, new[k], c * K, 1) for k, q in out.items()}
        return (back, out), None

    def step(carry, xs):
        (xb, yb, ub, vb), acc, pol = carry
        (X, Y, U, V, t), u, cts = xs
        if cts[0] is not None:
            xb, yb = xb + cts[0][0], yb + cts[0][1]
        if cts[1] is not None:
            ub, vb = ub + cts[1][0], vb + cts[1][1]
        if policy is not None:
            u, pull = jax.vjp(policy_inputs, [consts[i] for i in diff], X, Y, U, V, t)
        bar, u_bar, ch = step_adjoint(X, Y, U, V, u, (xb, yb, ub, vb))
        acc = {k: jax.tree.map(jnp.add, acc[k], ch[k]) for k in acc}
        if policy is None:
            return (bar, acc, pol), tuple(q if want else None for q, want in zip(u_bar, wanted_rows))
        d_bar, *s_bar = pull(u_bar)  # the policy's: into its arguments and the state at the step's start
        bar = tuple(q + p for q, p in zip(bar, s_bar))
        return (bar, acc, (pol[0] + s_bar[4], [q + p for q, p in zip(pol[1], d_bar)])), None

    zeros = lambda k: jnp.zeros((k, axis_size), dtype)  # noqa: E731
    pm = lambda q: (zeros(n),) * 2 if q is None else (q[..., 0].T, q[..., 1].T)  # noqa: E731  (B, n, 2) -> rows
    start = (*pm(field(ct_final, "x")), *pm(field(ct_final, "v")))
    fields = [k for k in CHAIN_FIELDS if k in chain_wanted and (kind or k not in ("s", "c"))]
    acc = {k: (zeros(n), zeros(n)) if k == "s" else zeros(n - 1 if k == "l" else n) for k in fields}
    # the policy's share of the time's and its arguments' cotangents, summed over the steps
    pol = None if policy is None else (jnp.zeros((axis_size,), dtype), [jnp.zeros_like(consts[i]) for i in diff])
    wanted_rows = [k in inputs_wanted for k in ("tau", "F", "F", "a_w", "a_w")]  # u_bar: tau, F_x, F_y, a^w_x, a^w_y
    shape = lambda k: (axis_size, T, n) + (() if k == "tau" else (2,))  # noqa: E731  an input's, batch first
    out = {} if no_input or policy is not None else {k: jnp.zeros(shape(k), dtype) for k in INPUT_FIELDS
                                                     if k in inputs_wanted}
    ((bar, acc, pol), out), _ = jax.lax.scan(block, ((start, acc, pol), out), jnp.arange(T // K), reverse=True)
    t_bar = jnp.zeros((axis_size,), dtype) if policy is None else pol[0]  # t' = t + dt: passed on by each step
    t_bar = t_bar if field(ct_final, "t") is None else t_bar + field(ct_final, "t")
    t_bar = t_bar if field(ct_traj, "t") is None else t_bar + jnp.sum(field(ct_traj, "t"), 1)
    state_bar = (pts(bar[0], bar[1]), pts(bar[2], bar[3]), t_bar)
    if policy is not None:
        args_bar = dict(zip(diff, pol[1]))
        controls_bar = [args_bar.get(i) for i in range(len(consts))]
    else:
        controls_bar = None if no_input else tuple(out.get(k) for k in INPUT_FIELDS)
    chain_bar = {k: jnp.sum(q, 0) if k == "g" else pts(*q) if k == "s" else q.T for k, q in acc.items()}
    return chain_bar, state_bar, controls_bar

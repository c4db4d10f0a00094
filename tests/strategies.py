"""Random chains, poses and inputs for property-based tests (hypothesis + numpy)."""
import equinox as eqx
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

import diffchain as dc

SIZES = (1, 2, 3, 4, 5, 8, 13, 21, 40, 64)  # a fixed menu of n bounds the number of jit compilations


@st.composite
def random_problem(draw, sizes=SIZES, kinds=True, pose=None, links=False):
    """(chain, state, control, description): every joint kind, random or near-stretched or folded poses; with
    ``links`` rigid links with random mass, centre of mass and inertia, and some massless points."""
    n = draw(st.sampled_from(sizes))
    seed = draw(st.integers(0, 2**32 - 1))
    pose = pose or draw(st.sampled_from(["random", "stretched", "folded"]))
    return make_problem(n, seed, pose, kinds, links)


def make_problem(n, seed, pose="random", kinds=True, links=False):
    """The deterministic body of :func:`random_problem` (to replay a failing example by its description)."""
    rng = np.random.default_rng(seed)
    m = np.exp(rng.uniform(-1.5, 1.5, n))
    l = np.exp(rng.uniform(-1.0, 1.0, n - 1))
    if kinds:
        kind = rng.choice(3, size=n, p=[0.6, 0.2, 0.2])  # 0 free, 1 guided, 2 slider
    else:
        kind = np.zeros(n, int)
    # Between two guided points at least one point must be free, or the run is over-constrained (a slider pinned by
    # rods at both ends cannot move: seed §12.2 "stiffness"; the recursion then drops a rod, the KKT matrix is singular).
    g_idx = np.flatnonzero(kind == 1)
    for i, j in zip(g_idx[:-1], g_idx[1:]):
        if j - i > 1 and np.all(kind[i + 1:j] == 2):
            kind[i + 1] = 0
    guided, slider = kind == 1, kind == 2
    # between two guided points a stretched or folded run is a true singularity (seed §12.2 "stiffness");
    # keep such poses a little away from it, and allow exact-ish straightness otherwise.
    closed = guided.sum() + slider.sum() >= 2
    tiny = 1e-2 if closed else 1e-7
    dev = np.exp(rng.uniform(np.log(tiny), np.log(0.1), n - 1)) * rng.choice([-1, 1], n - 1)
    theta = {"random": rng.uniform(-np.pi, np.pi, n - 1), "stretched": dev, "folded": np.pi - dev}[pose]
    theta = np.concatenate([[rng.uniform(-np.pi, np.pi)], theta[1:]]) if n > 1 else theta
    s = rng.normal(size=(n, 2))
    s /= np.linalg.norm(s, axis=1, keepdims=True)
    inertial = {}
    if links:
        m = m * (rng.uniform(size=n) < 0.6) if n > 1 else m
        inertial = dict(link_mass=np.exp(rng.uniform(-1.5, 1.5, n - 1)), link_com=rng.normal(size=(n - 1, 2)) * l[:, None],
                        link_inertia=np.exp(rng.uniform(-3, 0, n - 1)) * l**2)
    chain = dc.Chain(m, l, guided=guided, slider=slider, s=s, c=rng.normal(size=n),
                     k_omega=rng.uniform(0, 0.5, n), k_v=rng.uniform(0, 0.1, n), **inertial)
    state = dc.from_joint_angles(chain, theta, rng.normal(size=n - 1), base=rng.normal(size=2),
                                 base_velocity=rng.normal(size=2))
    control = dc.Control(tau=rng.normal(size=n), F=rng.normal(size=(n, 2)), a_w=rng.normal(size=(n, 2)))
    return chain, state, control, f"n={n} seed={seed} pose={pose} kinds={kind.tolist()}"


def consistent_start(chain, state):
    """``chain`` with every slider line through its point's initial position, and ``state`` with the velocities
    projected onto the rod and slider constraints: a start from which the constraints can be kept.

    :func:`make_problem`'s random line offsets c and velocities may leave no admissible motion at all (n=5 seed=4434:
    the guided point 5 lies 2.04 from the line of slider 3, the rods between reach 1.66): the PD drift correction then
    drags the chain into a singular pose and the rollout diverges. Fine for one solve, ill-posed for a rollout."""
    x, v, s = np.asarray(state.x), np.asarray(state.v), np.asarray(chain.s)
    guided, slider, n = np.asarray(chain.guided), np.asarray(chain.slider_mask), chain.n
    d = x[1:] - x[:-1]
    r = d / np.linalg.norm(d, axis=1, keepdims=True)
    rows = []
    for k in np.flatnonzero(~(guided[:-1] & guided[1:])):  # a rod between two guided points is switched off
        row = np.zeros((n, 2))
        row[k], row[k + 1] = -r[k], r[k]
        rows.append(row.ravel())
    for i in np.flatnonzero(slider):
        row = np.zeros((n, 2))
        row[i] = s[i]
        rows.append(row.ravel())
    if rows:
        J = np.array(rows)
        v = v - (np.linalg.pinv(J) @ (J @ v.ravel())).reshape(n, 2)
    chain = eqx.tree_at(lambda c: c.point_kinds.c, chain, jnp.sum(chain.s * state.x, -1))
    return chain, dc.State(state.x, jnp.asarray(v, state.v.dtype), state.t)

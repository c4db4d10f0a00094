"""Random chains, poses and inputs for property-based tests (hypothesis + numpy)."""
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

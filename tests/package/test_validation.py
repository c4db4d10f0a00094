"""Bad input gets an error that names the argument, outside ``jit`` and inside it.

Each case of :data:`CASES` is a function of array arguments that must raise, the exception type and a regular
expression naming the argument. Outside ``jit`` the arguments are concrete; a bad value (``value=True``) raises a
``dc.InputError``, also where a diffchain function compiled itself and the check ran with its program. Inside
``jax.jit`` they are traced: shape and type errors then raise the same exception at trace time, value errors raise
when the program runs, as JAX's error (a ``JaxRuntimeError``; a ``ValueError`` when a compiled program is reused) whose
first lines hold "InputError: " and the message. Then the inputs that used to be refused or to crash and are valid.
"""
import functools
import logging
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc

NAN, INF = float("nan"), float("inf")
CHAIN = dc.pendulum(2)
S0 = dc.from_joint_angles(CHAIN, jnp.array([0.3, -0.2]), jnp.array([0.5, 1.0]))
DT = 1e-3


def roll(chain=CHAIN, state=S0, controls=None, dt=DT, n_steps=1, **kw):
    return dc.rollout(chain, state, controls, dt, n_steps=n_steps, **kw)[0].x


EVENTS = dc.Events(CHAIN.n, ground=-10.0)


def ev_roll(es=None, controls=None, dt=DT, n_steps=1, **kw):
    es = dc.EventState(S0) if es is None else es
    return dc.event_rollout(CHAIN, EVENTS, es, controls, dt, n_steps=n_steps, **kw)[0].state.x


def four_bar():
    mb = dc.MechanismBuilder(g=9.81)
    mb.ground("O", (0.0, 0.0)), mb.ground("A", (3.0, 0.0))
    mb.point("B", (0.0, 1.0)), mb.point("C", (3.0, 2.5))
    mb.body("crank", "O", "B", mass=1.0, inertia=0.05)
    mb.body("coupler", "B", "C", mass=2.0, inertia=0.4)
    mb.body("rocker", "A", "C", mass=1.5, inertia=0.2)
    mb.motor("crank_motor", "ground", "crank")
    return mb.build()


MECH, MS0 = four_bar()


def builder(**body):
    mb = dc.MechanismBuilder()
    mb.ground("O", (0.0, 0.0)), mb.point("B", (1.0, 0.0))
    mb.body("crank", "O", "B", **{"mass": 1.0, "inertia": 0.1, **body})
    return mb


def spring(**kw):
    mb = builder()
    mb.spring("s", "O", "B", **kw)


def mech_roll(tau=None, dt=DT, n_steps=1, state=MS0, **kw):
    return dc.rollout(MECH, state, None if tau is None else dc.Control(tau=tau), dt, n_steps=n_steps, **kw)[0].x


def a(*v):
    return jnp.array(v, float)


class ForwardOnly(dc.Integrator):
    """An integrator of the user's that does not declare ``backward = True`` (it integrates forward only)."""

    def __call__(self, accel, state, dt):
        return dc.SeedQuantum()(accel, state, dt)


def sc(v):
    return jnp.asarray(v, float)


V, S, T = True, False, False  # value check (run time under jit), shape check, type check (both: trace time)
# (id, function, arguments, exception, phrase naming the argument, value)
CASES = [
    # Chain values
    ("m nan", lambda m: dc.Chain(m, [1.0]).m, (a(1.0, NAN),), ValueError, "Chain: m must be finite", V),
    ("m inf", lambda m: dc.Chain(m, [1.0]).m, (a(1.0, INF),), ValueError, "Chain: m must be finite", V),
    ("m zero", lambda m: dc.Chain(m, [1.0]).m, (a(1.0, 0.0),), ValueError, "Chain: m must be positive", V),
    ("m negative", lambda m: dc.Chain(m, [1.0]).m, (a(-1.0, 1.0),), ValueError, "Chain: m must be positive", V),
    ("l nan", lambda l: dc.Chain([1.0, 1.0], l).l, (a(NAN),), ValueError, "Chain: l must be finite", V),
    ("l inf", lambda l: dc.Chain([1.0, 1.0], l).l, (a(INF),), ValueError, "Chain: l must be finite", V),
    ("l zero", lambda l: dc.Chain([1.0, 1.0], l).l, (a(0.0),), ValueError, "Chain: l must be positive", V),
    ("l negative", lambda l: dc.Chain([1.0, 1.0], l).l, (a(-0.5),), ValueError, "Chain: l must be positive", V),
    ("pendulum mass 0", lambda m: roll(dc.pendulum(2, mass=m)), (sc(0.0),), ValueError, "Chain: m must be positive", V),
    ("pendulum length 0", lambda l: roll(dc.pendulum(2, length=l)), (sc(0.0),), ValueError,
     "Chain: l must be positive", V),
    ("k_omega negative", lambda k: dc.pendulum(2, k_omega=k).k_omega, (sc(-1.0),), ValueError,
     "Chain: k_omega must be finite and non-negative", V),
    ("k_omega nan", lambda k: dc.pendulum(2, k_omega=k).k_omega, (sc(NAN),), ValueError,
     "Chain: k_omega must be finite and non-negative", V),
    ("k_v negative", lambda k: dc.pendulum(2, k_v=k).k_v, (sc(-1.0),), ValueError,
     "Chain: k_v must be finite and non-negative", V),
    ("g nan", lambda g: dc.pendulum(2, g=g).g, (sc(NAN),), ValueError, "Chain: g must be finite", V),
    ("c nan", lambda c: dc.cart_chain(1, offset=c).c, (sc(NAN),), ValueError, "Chain: c must be finite", V),
    ("s not unit", lambda s: dc.Chain([1.0, 1.0], [1.0], slider=[True, False], s=s).s, (a([0.0, 2.0], [0.0, 1.0]),),
     ValueError, "Chain: s must be unit vectors", V),
    ("link_mass negative", lambda lm: dc.Chain([1.0, 1.0], [1.0], link_mass=lm).link_mass, (a(-1.0),), ValueError,
     "Chain: link_mass must be non-negative", V),
    ("link_mass nan", lambda lm: dc.Chain([1.0, 1.0], [1.0], link_mass=lm).link_mass, (a(NAN),), ValueError,
     "Chain: link_mass must be finite", V),
    ("link_inertia negative", lambda j: dc.Chain([1.0, 1.0], [1.0], link_mass=1.0, link_inertia=j).link_inertia,
     (a(-0.1),), ValueError, "Chain: link_inertia must be non-negative", V),
    ("link_com nan", lambda com: dc.Chain([1.0, 1.0], [1.0], link_mass=1.0, link_com=com).link_com,
     (a([NAN, 0.0]),), ValueError, "Chain: link_com must be finite", V),
    ("point without mass", lambda lm: dc.Chain([0.0, 0.0], [1.0], link_mass=lm, link_com=[[1.0, 0.0]]).m,
     (a(1.0),), ValueError, "Chain: (points .* carry no mass|every point must carry mass)", V),
    # Chain shapes
    ("m 2-D", lambda m: dc.Chain(m, [1.0]), (jnp.ones((1, 2)),), ValueError, "Chain: masses m must be a 1-D array", S),
    ("l length", lambda l: dc.Chain([1.0, 1.0], l), (a(1.0, 1.0),), ValueError, "Chain: lengths l must have shape", S),
    ("guided length", lambda m: dc.Chain(m, [1.0], guided=[True]), (a(1.0, 1.0),), ValueError,
     "Chain: guided must have one flag per point", S),
    ("slider length", lambda m: dc.Chain(m, [1.0], slider=[True, False, False]), (a(1.0, 1.0),), ValueError,
     "Chain: slider must have one flag per point", S),
    ("link_com one pair", lambda com: dc.Chain([1.0, 1.0, 1.0], [1.0, 1.0], link_mass=1.0, link_com=com),
     (a(0.5, 0.0),), ValueError, r"Chain: link_com must have shape \(n-1, 2\) = \(2, 2\)", S),
    ("link_com three columns", lambda com: dc.Chain([1.0, 1.0], [1.0], link_mass=1.0, link_com=com),
     (jnp.zeros((1, 3)),), ValueError, "Chain: link_com must have shape", S),
    ("link_mass length", lambda lm: dc.Chain([1.0, 1.0, 1.0], [1.0, 1.0], link_mass=lm), (a(1.0),), ValueError,
     "Chain: link_mass must have shape", S),
    ("s shape", lambda s: dc.Chain([1.0, 1.0], [1.0], s=s), (jnp.ones((3, 2)),), ValueError,
     r"Chain: s \(slider normals\) must have shape", S),
    ("c shape", lambda c: dc.Chain([1.0, 1.0], [1.0], c=c), (jnp.zeros(3),), ValueError,
     r"Chain: c \(slider offsets\) must have shape", S),
    ("k_v shape", lambda k: dc.Chain([1.0, 1.0], [1.0], k_v=k), (jnp.zeros(3),), ValueError, "Chain: k_v must have shape",
     S),
    ("k_omega shape", lambda k: dc.Chain([1.0, 1.0], [1.0], k_omega=k), (jnp.zeros(3),), ValueError,
     "Chain: k_omega must be a scalar or have shape", S),
    ("g vector", lambda g: dc.Chain([1.0, 1.0], [1.0], g=g), (a(0.0, -9.81),), ValueError, "Chain: g must be a scalar",
     S),
    # State and Control
    ("State v shape", lambda x: dc.State(x, jnp.zeros((2, 2))), (S0.x,), ValueError, "State: v must have the shape of x",
     S),
    ("State x shape", lambda x: dc.State(x), (jnp.zeros((3, 3)),), ValueError, r"State: x must have shape \(n, 2\)", S),
    ("State t vector", lambda t: dc.State(S0.x, S0.v, t), (jnp.zeros(3),), ValueError, "State: t must be a scalar", S),
    ("Control F shape", lambda tau: dc.Control(tau=tau, F=jnp.zeros((3, 3))), (jnp.zeros(3),), ValueError,
     r"Control: F must have shape \(\.\.\., P, 2\)", S),
    ("rollout control F n", lambda F: roll(controls=dc.Control(tau=jnp.zeros((1, 3)), F=F)), (jnp.zeros((1, 2, 2)),),
     ValueError, r"rollout: the control has F of shape \(1, 2, 2\), the chain has n = 3 points", S),
    ("rollout state n", lambda x: roll(state=dc.State(x)), (jnp.zeros((4, 2)),), ValueError,
     r"rollout: the state has x of shape \(4, 2\)", S),
    ("rollout control n", lambda tau: roll(controls=dc.Control(tau=tau)), (jnp.zeros((1, 4)),), ValueError,
     "rollout: the control has tau of shape", S),
    ("rollout state type", lambda x: roll(state=(x, x)), (S0.x,), TypeError, "rollout: state must be a diffchain.State",
     T),
    ("rollout dtypes", lambda x: roll(state=dc.State(x)), (S0.x.astype(jnp.float32),), TypeError,
     "rollout: the state is float32 but the chain is float64", T),
    # rollout: dt, n_steps, checkpoint
    ("dt nan", lambda dt: roll(dt=dt), (sc(NAN),), ValueError, "rollout: dt must be finite and nonzero", V),
    ("dt inf", lambda dt: roll(dt=dt), (sc(INF),), ValueError, "rollout: dt must be finite and nonzero", V),
    ("dt zero", lambda dt: roll(dt=dt), (sc(0.0),), ValueError, "rollout: dt must be finite and nonzero", V),
    ("dt negative, forward-only integrator", lambda dt: roll(dt=dt, integrator=ForwardOnly()), (sc(-1e-3),),
     ValueError, r"rollout: dt must be finite and > 0 for integrator=ForwardOnly\(.*\), which does not integrate "
     r"backward in time \(an Integrator that does sets backward = True\), got -0.001", V),
    ("dt vector", lambda dt: roll(dt=dt), (a(1e-3, 1e-3),), ValueError, "rollout: dt must be a scalar", S),
    ("n_steps negative", lambda x: roll(state=dc.State(x), n_steps=-1), (S0.x,), ValueError,
     "rollout: n_steps must be an int >= 0", S),
    ("n_steps float", lambda x: roll(state=dc.State(x), n_steps=2.5), (S0.x,), TypeError,
     "rollout: n_steps must be an int >= 0", T),
    ("n_steps bool", lambda x: roll(state=dc.State(x), n_steps=True), (S0.x,), TypeError,
     "rollout: n_steps must be an int >= 0", T),
    ("checkpoint zero", lambda x: roll(state=dc.State(x), n_steps=4, checkpoint=0), (S0.x,), ValueError,
     "rollout: checkpoint must be None or an int >= 1", S),
    ("checkpoint not a divisor", lambda x: roll(state=dc.State(x), n_steps=5, checkpoint=2), (S0.x,), ValueError,
     "rollout: n_steps=5 must be a multiple of checkpoint=2", S),
    # rollout: integrator and solver
    ("integrator str", lambda x: roll(state=dc.State(x), integrator="rk4"), (S0.x,), TypeError,
     "rollout: integrator must be an Integrator instance: Projected", T),
    ("integrator class", lambda x: roll(state=dc.State(x), integrator=dc.RK4), (S0.x,), TypeError,
     r"rollout: integrator must be an Integrator .* the class RK4 \(pass an instance", T),
    ("solver str", lambda x: roll(state=dc.State(x), solver="kkt"), (S0.x,), TypeError,
     r"rollout: solver must be a solver instance: Recursive\(\), ShortChain\(\), Banded\(\), KKT\(\), "
     r"RangeSpace\(\), NullSpace\(\) or Larin\(\)", T),
    ("solver class", lambda x: roll(state=dc.State(x), solver=dc.NullSpace), (S0.x,), TypeError,
     r"rollout: solver must be a solver instance: .* the class NullSpace \(pass an instance", T),
    ("stab_factor zero", lambda dt: dc.RK4(stab_factor=0.0).stab(dt), (sc(DT),), ValueError,
     "RK4: stab_factor must be None .* or a finite number > 0", S),
    ("stab_factor nan", lambda dt: dc.SeedQuantum(stab_factor=NAN).stab(dt), (sc(DT),), ValueError,
     "SeedQuantum: stab_factor must be None", S),
    # rollout: controls
    ("controls without time axis", lambda tau: roll(controls=dc.Control(tau=tau)), (jnp.zeros(3),), ValueError,
     "rollout: controls must carry a leading time axis", S),
    ("controls an array", lambda tau: roll(controls=tau), (jnp.zeros((1, 3)),), TypeError,
     "rollout: controls must be a diffchain.Control", T),
    ("controls n_steps", lambda tau: roll(controls=dc.Control(tau=tau), n_steps=5), (jnp.zeros((2, 3)),), ValueError,
     "rollout: n_steps=5 but the controls have 2 steps", S),
    ("controls tau nan", lambda tau: roll(controls=dc.Control(tau=tau), n_steps=None), (jnp.zeros((2, 3)).at[1, 1].set(NAN),),
     ValueError, "rollout: the control's tau must be finite", V),
    ("controls F inf", lambda F: roll(controls=dc.Control(F=F), n_steps=None), (jnp.zeros((2, 3, 2)).at[0, 2, 0].set(INF),),
     ValueError, "rollout: the control's F must be finite", V),
    ("controls a_w nan", lambda aw: roll(controls=dc.Control(a_w=aw), n_steps=None),
     (jnp.zeros((2, 3, 2)).at[0, 0, 0].set(NAN),), ValueError, "rollout: the control's a_w must be finite", V),
    ("policy without n_steps", lambda x: roll(state=dc.State(x), controls=lambda s: dc.Control(n=3), n_steps=None),
     (S0.x,), ValueError, "rollout: a policy .* needs n_steps", S),
    ("policy control n", lambda x: roll(state=dc.State(x), controls=lambda s: dc.Control(n=4)), (S0.x,), ValueError,
     "rollout: the control has tau of shape", S),
    ("policy returns an array", lambda x: roll(state=dc.State(x), controls=lambda s: jnp.zeros(3)), (S0.x,), TypeError,
     "rollout: the policy must return a diffchain.Control", T),
    # rollout: the start
    ("start stretched", lambda x: roll(state=dc.State(x, S0.v)), (S0.x.at[2].add(0.01),), ValueError,
     "check_state: the state is off the constraint manifold", V),
    ("start nan", lambda x: roll(state=dc.State(x, S0.v)), (S0.x.at[1, 0].set(NAN),), ValueError,
     "check_state: the state must be finite", V),
    ("start velocity", lambda v: roll(state=dc.State(S0.x, v)), (S0.v.at[2].add(S0.x[2] - S0.x[1]),), ValueError,
     "check_state: the velocities violate the constraints", V),
    # step and forward_dynamics
    ("step dt zero", lambda dt: dc.step(CHAIN, S0, dc.Control(n=3), dt).x, (sc(0.0),), ValueError,
     "step: dt must be finite and nonzero", V),
    ("step state nan", lambda x: dc.step(CHAIN, dc.State(x, S0.v), dc.Control(n=3), DT).x, (S0.x.at[1, 0].set(NAN),),
     ValueError, r"step: the state must be finite, but x or v holds NaN or inf \(max\|x\|, max\|v\| = \[ *nan", V),
    ("step control nan", lambda tau: dc.step(CHAIN, S0, dc.Control(tau=tau), DT).x, (a(0.0, NAN, 0.0),), ValueError,
     "step: the control's tau must be finite", V),
    ("step control sequence", lambda tau: dc.step(CHAIN, S0, dc.Control(tau=tau), DT), (jnp.zeros((2, 3)),), ValueError,
     "step: control must be one control", S),
    ("step integrator", lambda dt: dc.step(CHAIN, S0, dc.Control(n=3), dt, integrator="rk4"), (sc(DT),), TypeError,
     "step: integrator must be an Integrator", T),
    ("forward_dynamics solver", lambda x: dc.forward_dynamics(CHAIN, dc.State(x), solver=dc.KKT), (S0.x,), TypeError,
     r"forward_dynamics: solver must be a solver instance: .* the class KKT \(pass an instance", T),
    ("forward_dynamics state nan", lambda x: dc.forward_dynamics(CHAIN, dc.State(x, S0.v)), (S0.x.at[1, 0].set(NAN),),
     ValueError, r"forward_dynamics: the state must be finite, but x or v holds NaN or inf", V),
    ("forward_dynamics velocity inf", lambda v: dc.forward_dynamics(CHAIN, dc.State(S0.x, v)), (S0.v.at[2, 1].set(INF),),
     ValueError, r"forward_dynamics: the state must be finite, but x or v holds NaN or inf .* inf\]\)", V),
    ("forward_dynamics control nan", lambda tau: dc.forward_dynamics(CHAIN, S0, dc.Control(tau=tau)),
     (a(0.0, NAN, 0.0),), ValueError, "forward_dynamics: the control's tau must be finite", V),
    ("forward_dynamics mechanism state nan", lambda x: dc.forward_dynamics(MECH, dc.State(x, MS0.v)),
     (MS0.x.at[0, 1].set(NAN),), ValueError, "forward_dynamics: the state must be finite", V),
    # sensitivities
    ("dalpha_dtau state n", lambda x: dc.dalpha_dtau(CHAIN, dc.State(x)), (jnp.zeros((4, 2)),), ValueError,
     r"dalpha_dtau: the state has x of shape \(4, 2\), the chain has n = 3 points: x and v must be \(3, 2\)", S),
    ("da_dF state n", lambda x: dc.da_dF(CHAIN, dc.State(x)), (jnp.zeros((4, 2)),), ValueError,
     r"da_dF: the state has x of shape \(4, 2\), the chain has n = 3 points", S),
    ("dalpha_dtau control n", lambda tau: dc.dalpha_dtau(CHAIN, S0, dc.Control(tau=tau)), (jnp.zeros(4),), ValueError,
     r"dalpha_dtau: the control has tau of shape \(4,\), the chain has", S),
    ("dalpha_dtau mode", lambda x: dc.dalpha_dtau(CHAIN, dc.State(x), mode="forward"), (S0.x,), ValueError,
     r"dalpha_dtau: mode must be 'fwd' \(jax.jacfwd\) or 'rev' \(jax.jacrev\), got 'forward'", S),
    ("dalpha_dtau mechanism", lambda x: dc.dalpha_dtau(MECH, dc.State(x)), (MS0.x,), TypeError,
     "dalpha_dtau: chain must be a serial chain", T),
    # mechanisms
    # event rollouts
    ("event dt zero", lambda dt: ev_roll(dt=dt), (sc(0.0),), ValueError, "event_rollout: dt must be finite and > 0", V),
    ("event dt nan", lambda dt: ev_roll(dt=dt), (sc(NAN),), ValueError, "event_rollout: dt must be finite and > 0", V),
    ("event dt negative", lambda dt: ev_roll(dt=dt), (sc(-1e-3),), ValueError,
     r"event_rollout: dt must be finite and > 0 \(events need forward time: their times are the roots ahead\), got "
     r"-0.001", V),
    ("event n_steps negative", lambda dt: ev_roll(dt=dt, n_steps=-1), (sc(DT),), ValueError,
     "event_rollout: n_steps must be", S),
    ("event solver", lambda dt: ev_roll(dt=dt, solver="kkt"), (sc(DT),), TypeError,
     "event_rollout: solver must be a solver instance", T),
    ("event integrator", lambda dt: ev_roll(dt=dt, integrator=dc.RK4()), (sc(DT),), TypeError,
     r"event_rollout: integrator must be VelocityVerlet\(\) or SeedQuantum\(\) .* got RK4", T),
    ("event state type", lambda x: ev_roll(es=dc.State(x)), (S0.x,), TypeError, "event_rollout: es must be", T),
    ("event controls no time axis", lambda tau: ev_roll(controls=dc.Control(tau=tau)), (jnp.zeros(3),), ValueError,
     "event_rollout: controls must carry a leading time axis", S),
    ("event controls nan", lambda tau: ev_roll(controls=dc.Control(tau=tau)), (jnp.full((1, 3), NAN),), ValueError,
     "event_rollout: the control's tau must be finite", V),
    ("event start below the ground", lambda x: dc.check_event_state(CHAIN, dc.Events(CHAIN.n, ground=5.0),
                                                                    dc.EventState(dc.State(x, S0.v))).state.x,
     (S0.x,), ValueError, "check_event_state: every free contact point must start on or above its obstacle", V),
    ("event start outside a limit", lambda x: dc.check_event_state(
        CHAIN, dc.Events(CHAIN.n, theta_min=a(-INF, -0.1), theta_max=a(INF, 0.1)),
        dc.EventState(dc.State(x, S0.v))).state.x,
     (S0.x,), ValueError, "check_event_state: every free joint must start within its angle limits", V),
    ("event_rollout start below the ground", lambda x: dc.event_rollout(
        CHAIN, dc.Events(CHAIN.n, ground=5.0), dc.EventState(dc.State(x, S0.v)), None, DT, n_steps=1)[0].state.x,
     (S0.x,), ValueError, "check_event_state: every free contact point must start on or above its obstacle lines .* "
     "got one 4.7 m below", V),
    ("event_rollout start outside a limit", lambda x: dc.event_rollout(
        CHAIN, dc.Events(CHAIN.n, theta_min=a(-INF, -0.1), theta_max=a(INF, 0.1)), dc.EventState(dc.State(x, S0.v)),
        None, DT, n_steps=1)[0].state.x,
     (S0.x,), ValueError, "check_event_state: every free joint must start within its angle limits .* got one 0.1 rad "
     "outside", V),
    # Events values
    ("Events obstacle point nan", lambda z0: dc.Events(CHAIN.n, lines=(z0, a(0.0, 1.0)[None])).z0,
     (jnp.array([[0.0, NAN]]),), ValueError, r"Events: the obstacle points z0 must be finite, got the point \[ 0. nan\]",
     V),
    ("Events ground inf", lambda y: dc.Events(CHAIN.n, ground=y).z0, (sc(-INF),), ValueError,
     r"Events: the obstacle points z0 must be finite, got the point \[  0. -inf\]", V),
    ("Events normal not unit", lambda z: dc.Events(CHAIN.n, lines=(jnp.zeros((1, 2)), z)).z,
     (a(0.0, 2.0)[None],), ValueError, r"Events: obstacle normals z must be unit vectors .* got a normal of norm 2\.", V),
    ("Events limits reversed", lambda lo, hi: dc.Events(CHAIN.n, theta_min=lo, theta_max=hi).theta_min,
     (a(-INF, 0.5), a(INF, 0.1)), ValueError, "Events: need theta_min < theta_max at every joint .*: joint 2 has "
     "theta_min = 0.5, theta_max = 0.1", V),
    ("Events limit nan", lambda lo: dc.Events(CHAIN.n, theta_min=lo, theta_max=1.0).theta_max, (a(NAN, -1.0),),
     ValueError, "Events: need theta_min < theta_max at every joint .*: joint 1 has theta_min = nan", V),
    ("Events limit beyond pi", lambda hi: dc.Events(CHAIN.n, theta_max=hi).theta_max, (sc(4.0),), ValueError,
     r"Events: angle limits must lie in \[-pi, pi\] .*: joint 1 has theta_min = -inf, theta_max = 4", V),
    ("mechanism tau length", lambda tau: mech_roll(tau), (jnp.zeros((1, 2)),), ValueError,
     r"rollout: a mechanism's controls hold one torque per motor, Control\(tau=...\) of shape \(T, n_motors\) = "
     r"\(T, 1\)", S),
    ("mechanism tau steps", lambda tau: mech_roll(tau, n_steps=2), (jnp.zeros((3, 1)),), ValueError,
     r"rollout: n_steps=2 but the controls have 3 steps", S),
    ("mechanism tau nan", lambda tau: mech_roll(tau), (jnp.full((1, 1), NAN),), ValueError,
     "rollout: the control's tau must be finite", V),
    ("mechanism integrator RATTLE", lambda dt: mech_roll(dt=dt, integrator=dc.RATTLE()), (sc(DT),), TypeError,
     r"rollout: integrator must be a plain integrator .* or one of them Projected\(\): RATTLE works on", T),
    ("mechanism dt zero", lambda dt: mech_roll(dt=dt), (sc(0.0),), ValueError,
     "rollout: dt must be finite and nonzero", V),
    ("mechanism start off its loop", lambda x: mech_roll(state=dc.State(x, MS0.v, MS0.t)), (MS0.x.at[1, 0].add(0.05),),
     ValueError, r"rollout: the start must satisfy the mechanism's loop closure Phi\(q, t\) = 0 \(to 1e-06 of its "
     r"longest length\), got \|Phi\| = 0\.0\d+ \(allowed: .*\); assemble it first: state, info = "
     r"dc\.assemble\(mechanism, guess\)", V),
    ("mechanism start nan", lambda x: mech_roll(state=dc.State(x, MS0.v, MS0.t)), (MS0.x.at[0, 0].set(NAN),),
     ValueError, "rollout: the start must be finite, but x or v holds NaN or inf", V),
    ("mechanism start velocity", lambda v: mech_roll(state=dc.State(MS0.x, v, MS0.t)), (MS0.v.at[0, 0].set(1.0),),
     ValueError, r"rollout: the start's velocities must satisfy the mechanism's velocity constraints .* "
     r"dc\.velocity_analysis\(mechanism, state\)", V),
    ("mechanism n_steps", lambda dt: mech_roll(dt=dt, n_steps=-2), (sc(DT),), ValueError,
     "rollout: n_steps must be an int >= 0", S),
    ("rollout model", lambda dt: dc.rollout({"m": CHAIN.m}, S0, None, dt, n_steps=1)[0].x, (sc(DT),), TypeError,
     r"rollout: model must be a diffchain model \(a Chain, pendulum\(...\), ..., or a mechanism from "
     r"MechanismBuilder\), got \{'m'", T),
    ("forward_dynamics mechanism held", lambda x: dc.forward_dynamics(MECH, dc.State(x), held=jnp.ones(3, bool)),
     (MS0.x,), ValueError, r"forward_dynamics: held joints \(seed 000 Part II\) are a chain's", T),
    ("forward_dynamics mechanism tau", lambda tau: dc.forward_dynamics(MECH, MS0, dc.Control(tau=tau)),
     (jnp.zeros(2),), ValueError, r"forward_dynamics: a mechanism's controls hold one torque per motor, "
     r"Control\(tau=...\) of shape \(n_motors,\) = \(1,\)", T),
    ("mechanism integrator", lambda dt: mech_roll(dt=dt, integrator="rk4"), (sc(DT),), TypeError,
     "rollout: integrator must be an Integrator", T),
    ("mechanism solver", lambda dt: mech_roll(dt=dt, solver=dc.Recursive()), (sc(DT),), TypeError,
     r"rollout: Recursive\(\) solves serial chains only \(the seed-000 recursion\); a mechanism needs a dense solver",
     T),
    ("mechanism state", lambda x: mech_roll(state=dc.State(x)), (jnp.zeros((3, 2)),), ValueError,
     "rollout: the state must hold the mechanism's N = 2 coordinate points", S),
    ("forward_dynamics mechanism F alone", lambda F: dc.forward_dynamics(MECH, MS0, dc.Control(F=F)),
     (jnp.zeros((6, 2)),), ValueError, r"got tau of shape \(6,\) \(a Control given F alone has one zero torque per "
     r"point: pass tau too\)", T),
    ("forward_dynamics mechanism F", lambda F: dc.forward_dynamics(MECH, MS0, dc.Control(tau=jnp.zeros(1), F=F)),
     (jnp.zeros((3, 2)),), ValueError, r"forward_dynamics: a mechanism's point forces hold one force per point, "
     r"Control\(F=...\) of shape \(P, 2\) = \(6, 2\) .*, got F of shape \(3, 2\)", T),
    ("builder mass inf", lambda: builder(mass=INF), (), ValueError, "body 'crank' mass must be a finite number", S),
    ("builder inertia nan", lambda: builder(inertia=NAN), (), ValueError, "body 'crank' inertia must be a finite", S),
    ("builder mass negative", lambda: builder(mass=-1.0), (), ValueError, "body 'crank' needs mass >= 0", S),
    ("builder length inf", lambda: builder(length=INF), (), ValueError, "body 'crank' length must be a finite", S),
    ("builder com", lambda: builder(com=(0.5, 0.0, 0.0)), (), ValueError, r"body 'crank' com \(a, b\) must be two finite",
     S),
    ("builder g", lambda: dc.MechanismBuilder(g=NAN), (), ValueError, "MechanismBuilder: g must be a finite number", S),
    ("builder spring k", lambda: spring(k=NAN), (), ValueError, "spring 's' k must be a finite number", S),
    ("builder spring L0", lambda: spring(k=1.0, L0=-1.0), (), ValueError, "spring 's' L0 must be >= 0", S),
    ("from_joint_angles theta", lambda th: dc.from_joint_angles(CHAIN, th), (jnp.zeros(3),), ValueError,
     "from_joint_angles: theta must have shape", S),
]
IDS = [c[0] for c in CASES]
assert len(set(IDS)) == len(IDS) >= 60


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_input_outside_jit(case):
    """A bad value raises a dc.InputError (a ValueError) whether it is known at the call or checked by the compiled
    program of the diffchain function."""
    _, f, args, exc, phrase, value = case
    with pytest.raises(dc.InputError if value else exc, match=phrase):
        f(*args)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bad_input_inside_jit(case):
    _, f, args, exc, phrase, value = case
    if not value:
        with pytest.raises(exc, match=phrase):
            jax.jit(f)(*args)
        return
    jax.jit(f).lower(*args)  # traces: the check is in the program
    with pytest.raises((exc, jax.errors.JaxRuntimeError)) as info:
        jax.block_until_ready(jax.jit(f)(*args))
    top = "\n".join(str(info.value).splitlines()[:4])  # the message is at the top, not under the caller's stack
    assert re.search(f"InputError: (?:{phrase})", top), str(info.value)[:2000]


def test_values_are_checked_at_run_time_of_a_compiled_program():
    """A program compiled for good values raises on bad ones (the check is in the program, not in its tracing), and
    under ``vmap`` names the bad element of the batch."""
    run = jax.jit(lambda m, dt: roll(dc.pendulum(2, mass=m), dt=dt))
    assert np.all(np.isfinite(run(1.0, DT)))
    for m, dt, phrase in ((NAN, DT, "Chain: m must be finite"), (1.0, 0.0, "rollout: dt must be finite and nonzero")):
        with pytest.raises((ValueError, jax.errors.JaxRuntimeError), match=phrase):
            jax.block_until_ready(run(m, dt))
    batch = jax.vmap(lambda m: roll(dc.pendulum(2, mass=m)))
    with pytest.raises((ValueError, jax.errors.JaxRuntimeError),
                       match=r"Chain: m must be positive \(batch element 2\), got \[-1. -1. -1.\]"):
        jax.block_until_ready(jax.jit(batch)(a(1.0, 2.0, -1.0, 3.0)))


@pytest.mark.slow
@pytest.mark.full_opt  # bit for bit, checked against unchecked, as users' optimised code (conftest.py)
def test_checks_leave_valid_results_and_gradients_unchanged_and_switch_off():
    """Valid input: the checked program gives the bits of the unchecked one, value and gradient; with
    ``Chain(check=False)`` and ``rollout(check=False)`` the program holds no host callback."""
    tau = jnp.linspace(-1.0, 1.0, 30).reshape(10, 3)

    def final(m, l, dt, tau, check):
        chain = dc.pendulum(2, mass=m, length=l, check=check)
        start = dc.from_joint_angles(chain, jnp.array([0.3, -0.2]), jnp.array([0.5, 1.0]))
        return roll(chain, start, dc.Control(tau=tau), dt, n_steps=None, check=check).sum()

    args = (a(1.0, 2.0), a(0.5, 0.8), sc(DT), tau)
    for f in (final, jax.grad(final, argnums=(0, 1, 2, 3))):
        checked = jax.jit(lambda *xs, f=f: f(*xs, True))(*args)
        unchecked = jax.jit(lambda *xs, f=f: f(*xs, False))(*args)
        for c, u in zip(jax.tree.leaves(checked), jax.tree.leaves(unchecked)):
            np.testing.assert_array_equal(c, u)
    def callbacks(check):
        jaxpr = str(jax.make_jaxpr(lambda *xs: final(*xs, check))(*args))
        return [p for p in ("pure_callback", "io_callback", "debug_callback") if p in jaxpr]

    assert callbacks(True) and not callbacks(False)


@pytest.mark.slow
def test_float32_start_of_short_links_is_accepted():
    """The library's own float32 start (``from_joint_angles``) of 10 links of 1 cm, away from the origin, where the
    round-off of a position (~eps |x| = 2.4e-7 m) is far above 1e-6 of a rod: ``rollout`` accepts it in float32 and
    runs; a rod stretched by 1e-3 of its length (1e-5 m, far above the round-off) is still refused."""
    with jax.enable_x64(False):
        chain = dc.pendulum(10, mass=0.1, length=0.01)
        assert chain.m.dtype == jnp.float32
        rng = np.random.default_rng(0)
        for base in ((0.0, 0.0), (1.0, 2.0), (-3.0, 0.5)):
            theta, rate = rng.uniform(-3, 3, 10), rng.normal(size=10) * 5
            start = dc.from_joint_angles(chain, theta, rate, base=base)
            assert start.x.dtype == jnp.float32
            final, _ = dc.rollout(chain, start, None, 1e-4, n_steps=20)
            assert final.x.dtype == jnp.float32 and bool(jnp.all(jnp.isfinite(final.x)))
            final_jit, _ = jax.jit(lambda s: dc.rollout(chain, s, None, 1e-4, n_steps=20))(start)
            assert bool(jnp.all(jnp.isfinite(final_jit.x)))
            # stretch rod 5 by 1e-5 m along itself
            r = (start.x[5] - start.x[4]) / 0.01
            stretched = dc.State(start.x.at[5:].add(1e-5 * r), start.v)
            with pytest.raises(ValueError, match="off the constraint manifold"):
                dc.rollout(chain, stretched, None, 1e-4, n_steps=20)


def test_vmap_of_a_one_point_rollout_is_free_fall():
    """A chain of one point (no rod) under ``vmap`` (it used to crash): x(t) = x0 + v0 t - g t^2 / 2 e_y, exact for
    the seed's constant-acceleration quantum and for RK4."""
    g, dt, T = 9.81, 0.01, 100
    chain = dc.Chain([2.0], [], g=g)
    x0 = jnp.array([[[0.0, 1.0]], [[1.0, 2.0]], [[-2.0, 0.5]]])
    v0 = jnp.array([[[1.0, 0.5]], [[0.0, -1.0]], [[3.0, 4.0]]])
    starts = dc.State(x0, v0, jnp.zeros(3))
    t = dt * np.arange(1, T + 1)
    exact = (np.asarray(x0)[:, None] + np.asarray(v0)[:, None] * t[None, :, None, None]
             - 0.5 * g * np.array([0.0, 1.0]) * t[None, :, None, None] ** 2)
    for integrator in (dc.SeedQuantum(), dc.RK4()):
        run = functools.partial(dc.rollout, chain, controls=None, dt=dt, n_steps=T, integrator=integrator)
        _, traj = jax.vmap(run)(starts)
        np.testing.assert_allclose(traj.x, exact, rtol=0, atol=1e-12)
        np.testing.assert_allclose(traj.v[:, -1], np.asarray(v0) - g * np.array([0.0, 1.0]) * t[-1], atol=1e-12)


def test_empty_rollouts_under_vmap():
    """n_steps = 0 is valid (it used to fail under vmap): the final state is the start, the trajectory empty."""
    starts = jax.tree.map(lambda u: jnp.stack([u, u]), S0)
    final, traj = jax.vmap(lambda s: dc.rollout(CHAIN, s, None, DT, n_steps=0))(starts)
    np.testing.assert_array_equal(final.x, starts.x)
    assert traj.x.shape == (2, 0, 3, 2)


def test_integer_states_become_float():
    state = dc.State([[0, 0], [1, 0]])
    assert jnp.issubdtype(state.x.dtype, jnp.floating) and jnp.issubdtype(state.v.dtype, jnp.floating)


def test_a_failed_check_of_a_compiled_program_is_an_input_error_each_time():
    """A diffchain function raises the InputError of its failed run-time check, not JAX's error that reports it: the
    first time (a JaxRuntimeError holds it) and when the compiled program is run again (a ValueError holds it), eagerly
    and under an eager vmap (which runs the checks op by op), and it leaves no log of the callback's traceback and no
    logging filter behind. A failed run is not bad input: a plain ValueError."""
    logger = logging.getLogger("jax._src.callback")
    filters = list(logger.filters)
    for _ in range(2):
        with pytest.raises(dc.InputError, match=r"^rollout: dt must be finite and nonzero .*, got 0\.$"):
            dc.rollout(CHAIN, S0, None, jnp.asarray(0.0), n_steps=1)
    with pytest.raises(dc.InputError, match=r"^Chain: m must be positive \(batch element 2\), got \[-1\. -1\. -1\.\]"):
        jax.vmap(lambda m: roll(dc.pendulum(2, mass=m)))(a(1.0, 2.0, -1.0, 3.0))
    assert logger.filters == filters
    chain = dc.pendulum(5)
    start = dc.from_joint_angles(chain, jnp.array([0.3, 0.9, -0.7, 0.5, 0.4]))
    with pytest.raises(ValueError, match="rollout: the run ends") as info:  # (the seed's scheme at a large step)
        dc.rollout(chain, start, None, 1e-2, n_steps=500, integrator=dc.SeedQuantum())
    assert not isinstance(info.value, dc.InputError)


def test_diffchain_s_own_compiled_failures_log_no_traceback(caplog):
    """JAX logs the traceback of a failed host callback (the record "jax.pure_callback failed" of the logger
    "jax._src.callback", which a process prints on stderr): under a user's jax.jit it does; a diffchain function that
    raises the InputError of its check leaves it out."""
    stretched = S0.x.at[2].add(0.01)

    def records():
        found = [r for r in caplog.records if r.name == "jax._src.callback"]
        caplog.clear()
        return found

    with pytest.raises((jax.errors.JaxRuntimeError, ValueError)):
        jax.block_until_ready(jax.jit(lambda x: dc.check_state(CHAIN, dc.State(x, S0.v)).x)(stretched))
    assert [r.getMessage() for r in records()] == ["jax.pure_callback failed"]  # (JAX's, in a user's jit)
    with pytest.raises(dc.InputError):
        dc.rollout(CHAIN, dc.State(stretched, S0.v), None, DT, n_steps=1)
    with pytest.raises(dc.InputError):
        jax.vmap(lambda x: dc.check_state(CHAIN, dc.State(x, S0.v)).x)(jnp.stack([S0.x, stretched]))
    assert records() == []


def test_input_errors_of_a_user_s_jit_name_the_class_and_the_message():
    """Inside a jax.jit of the user's, JAX raises its own error; its text holds "InputError: <message>" on its third
    line (the callback's traceback is one frame long), whether the program is new or run again."""
    def below(x):
        return dc.check_event_state(CHAIN, dc.Events(CHAIN.n, ground=5.0), dc.EventState(dc.State(x, S0.v))).state.x

    run = jax.jit(below)
    for _ in range(2):
        with pytest.raises((jax.errors.JaxRuntimeError, ValueError)) as info:
            jax.block_until_ready(run(S0.x))
        assert not isinstance(info.value, dc.InputError)
        assert re.search(r"^InputError: check_event_state: every free contact point must start on or above its "
                         r"obstacle lines \(to 1e-06 of the longest rod\), got one 4\.7 m below$", str(info.value),
                         re.MULTILINE), str(info.value)
    with pytest.raises(dc.InputError, match="got one 4.7 m below"):
        below(S0.x)  # (eagerly: the values are known, the check raises at once)


def test_step_of_a_state_that_is_not_finite_says_so():
    """A NaN in dc.step's state is bad input, not a step too large: the message says so, not "a smaller dt"."""
    with pytest.raises(dc.InputError) as info:
        dc.step(CHAIN, dc.State(S0.x.at[1, 0].set(NAN), S0.v), dc.Control(n=3), DT)
    assert str(info.value).startswith("step: the state must be finite") and "smaller dt" not in str(info.value)


def test_event_step_refuses_a_known_dt_that_is_not_positive():
    """dc.event_step takes a dt known at trace time > 0 only (events need forward time), eagerly and inside jit."""
    es, events = dc.EventState(S0), dc.Events(CHAIN.n, ground=-10.0)
    for dt in (-1e-3, 0.0):
        with pytest.raises(dc.InputError, match=r"event_step: dt must be finite and > 0 \(events need forward time"):
            dc.event_step(CHAIN, events, es, None, dt)
        with pytest.raises(dc.InputError, match="event_step: dt must be finite and > 0"):
            jax.jit(lambda x, dt=dt: dc.event_step(CHAIN, events, dc.EventState(dc.State(x, S0.v)), None, dt))(S0.x)


def test_a_mechanism_started_where_assemble_puts_it_runs():
    """The start check of a mechanism's rollout passes what dc.assemble returns (the README's four-bar, drawn roughly
    with given lengths), and refuses the drawing itself and a start 5 cm off its loop closure."""
    mb = dc.MechanismBuilder(g=9.81)
    mb.ground("O", (0.0, 0.0)), mb.ground("A", (3.0, 0.0))
    mb.point("B", (0.5, 0.9)), mb.point("C", (3.4, 2.3))
    mb.body("crank", "O", "B", mass=1.0, inertia=0.05, length=1.0)
    mb.body("coupler", "B", "C", mass=2.0, inertia=0.4, length=3.0)
    mb.body("rocker", "A", "C", mass=1.5, inertia=0.2, length=2.5)
    mb.motor("crank_motor", "ground", "crank")
    four_bar, guess = mb.build()
    state, info = dc.assemble(four_bar, guess)
    assert int(info.status) == 0
    final, _ = dc.rollout(four_bar, state, None, 1e-3, n_steps=5)
    assert bool(jnp.all(jnp.isfinite(final.x)))
    for start in (guess, dc.State(state.x.at[1, 0].add(0.05), state.v, state.t)):
        with pytest.raises(dc.InputError, match=r"the start must satisfy the mechanism's loop closure .* dc\.assemble"):
            dc.rollout(four_bar, start, None, 1e-3, n_steps=5)

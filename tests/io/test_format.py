"""The model file format (diffchain.save / load, diffchain/_io/format.py): every kind of model the builders make
round-trips exactly (the same pytree: equal arrays, dtypes, static fields; so the same compiled program and the
same rollout bit for bit), saved files validate against the shipped JSON Schema, and malformed files are refused with
an error that names the entry by its JSON path."""
import dataclasses
import json

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import diffchain as dc
from diffchain import systems
from diffchain._io import format as fmt


def mechanism_with_every_kind():
    """A mechanism that uses every builder call: point masses, bodies (com, length), a massless rod, an attached
    point, revolute joints, a pin, a slider, a prismatic joint, drivers of each kind (polynomials and constants), a
    spring, a motor, a rotational damper, a torsional spring, drag and angle stops (one- and two-sided)."""
    mb = dc.MechanismBuilder(g=9.5)
    mb.ground("O", (0.0, 0.0)), mb.ground("A", (4.0, 0.0)), mb.ground("R0", (0.0, -1.0)), mb.ground("R1", (1.0, -1.0))
    mb.point("B", (0.0, 1.0), mass=0.3), mb.point("C", (4.0, 3.0))
    mb.point("S", (2.0, -1.0), mass=1.0), mb.point("T", (2.5, 2.0), mass=0.5), mb.point("U", (3.0, 2.0), mass=0.5)
    mb.point("V", (3.5, -1.0), mass=0.2), mb.point("W", (4.5, -1.0), mass=0.2)
    mb.body("crank", "O", "B", mass=1.0, inertia=0.1)
    mb.body("coupler", "B", "C", mass=2.0, com=(2.0, 0.1), inertia=0.4, length=5.0)
    mb.body("rocker", "A", "C", mass=1.0, inertia=0.2)
    mb.body("rail", "R0", "R1", rigid=False)
    mb.body("block", "V", "W", mass=0.4, inertia=0.01)
    mb.rod("link", "B", "S")
    mb.attach("E", "coupler", (1.0, -0.8))
    mb.revolute("hinge", "T", "E")
    mb.pin("anchor", "U")
    mb.slider("guide", "S", "R0", "R1")
    mb.prismatic("prism", "rail", "block")
    mb.drive("d_angle", "angle", ("O", "B"), dc.Polynomial((0.5, 2.0, -0.25)))
    mb.drive("d_dist", "distance", ("A", "C"), dc.Polynomial((3.0,)))
    mb.drive("d_rel", "relangle", ("O", "B", "A", "C"), 0.3)
    mb.drive("d_x", "x", ("V",), dc.Polynomial((3.5, 0.1)))
    mb.drive("d_y", "y", ("T",), 2.0)
    mb.spring("spring", "T", "U", k=50.0, L0=0.4, c=0.5)
    mb.motor("motor", "ground", "crank")
    mb.damper("friction", "crank", "coupler", 0.05)
    mb.torsional_spring("torsion", "ground", "rocker", k=3.0, c=0.1)
    mb.drag("C", 0.01), mb.drag("S", 0.02)
    mb.limit("stop_lo", "ground", "rocker", lo=0.2)
    mb.limit("stop_both", "crank", "coupler", lo=-1.0, hi=1.5)
    return mb.build()[0]


CHAINS = {
    "pendulum": lambda: dc.pendulum(3),
    "free_chain": lambda: dc.free_chain(2, mass=[1.0, 2.0, 3.0], length=[0.5, 1.5]),
    "cart_chain": lambda: dc.cart_chain(2, normal=(0.6, 0.8), offset=0.25),
    "every_option": lambda: dc.Chain(
        [1.0, 0.5, 0.25, 2.0], [0.3, 0.7, 1.1], guided=[True, False, False, False],
        slider=[False, True, False, True], s=[[0.0, 1.0], [0.6, 0.8], [0.0, 1.0], [1.0, 0.0]], c=[0.0, 0.1, 0.0, -0.2],
        k_omega=[0.1, 0.2, 0.3, 0.0], k_v=0.05, g=1.62, link_mass=[0.1, 0.2, 0.3],
        link_com=[[0.1, 0.01], [0.3, 0.0], [0.5, -0.02]], link_inertia=[0.01, 0.02, 0.03],
        torsion_k=[1.0, 2.0, 0.5, 0.0], torsion_theta0=[0.1, -0.2, 0.3, 0.0]),
    "float32": lambda: dc.pendulum(2, mass=np.float32(1.5), length=np.float32(0.1), k_omega=np.float32(0.1),
                                   link_mass=np.float32(0.3)),
    "mechanism": mechanism_with_every_kind,
    "four_bar_stop": lambda: systems.four_bar(stop=1.3)[0],
    "four_bar_float32": lambda: systems.four_bar(motor=False, dtype=jnp.float32)[0],
    **{f"systems.{name}": (lambda name=name: getattr(systems, name)().chain) for name in (
        "single_pendulum", "gym_pendulum", "acrobot", "weightlifting_arm", "cartpole", "gym_cartpole",
        "double_cart_pendulum", "triple_cart_pendulum")},
}


def assert_same(a, b):
    """The same pytree: the same structure and static fields (treedefs), each leaf the same type, dtype, shape and
    bits."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        assert type(x) is type(y) and x.dtype == y.dtype and x.shape == y.shape
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


@pytest.mark.parametrize("name", CHAINS)
def test_round_trip_is_exact(name, tmp_path):
    model = CHAINS[name]()
    path = tmp_path / "model.json"
    dc.save(model, path)
    loaded = dc.load(path)
    assert_same(model, loaded)
    assert loaded.serial == model.serial and loaded.dtype == model.dtype
    dc.save(loaded, tmp_path / "again.json")   # the text is a fixed point
    assert (tmp_path / "again.json").read_text() == path.read_text()


def test_files_validate_against_the_shipped_schema(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    with open(fmt.SCHEMA_FILE) as f:
        shipped = json.load(f)
    assert shipped == fmt.schema()   # (regenerate: diffchain._io.format.write_schema())
    jsonschema.Draft202012Validator.check_schema(shipped)
    validator = jsonschema.Draft202012Validator(shipped)
    events = dc.Events(CHAINS["mechanism"](), ground=-3.0, contact=["C", "S"])
    for name, build in CHAINS.items():
        model = build()
        doc = json.loads(fmt.dumps(model, events if name == "mechanism" else None))
        validator.validate(doc)
    bad = json.loads(fmt.dumps(CHAINS["pendulum"]()))
    bad["model"]["m"][1] = "abc"
    assert not validator.is_valid(bad)


def test_the_registry_covers_every_field():
    """Every field of every kind has an entry, in the class's order (a new field cannot be dropped silently)."""
    for name, kind in fmt.KINDS.items():
        assert list(kind.fields) == [f.name for f in dataclasses.fields(kind.cls)], name


def rollouts_agree(model, state, control, tmp_path):
    """The loaded model is the same pytree, so `rollout` takes the same compiled program (one compile) and returns the
    same bits."""
    dc.save(model, tmp_path / "m.json")
    loaded = dc.load(tmp_path / "m.json")
    run = jax.jit(lambda m, s, u: dc.rollout(m, s, u, 1e-3, integrator=dc.SemiImplicitEuler(), check=False))
    a, b = run(model, state, control), run(loaded, state, control)
    assert run._cache_size() == 1
    assert_same(a, b)
    assert np.all(np.isfinite(np.asarray(a[1].x))) and float(jnp.max(jnp.abs(a[1].x[-1] - state.x))) > 1e-6


def test_a_rollout_of_the_loaded_chain_is_bit_for_bit_the_same(tmp_path):
    """A chain with links, sliders, dampers, drag and torsional springs (from a state on its rods; its sliders' lines
    pull it onto them)."""
    chain = CHAINS["every_option"]()
    start = dc.from_joint_angles(chain, jnp.asarray([-0.5, 0.3, 0.2]))
    rollouts_agree(chain, start, dc.Control(tau=jnp.full((20, 4), 0.1)), tmp_path)


def test_a_rollout_of_the_loaded_mechanism_is_bit_for_bit_the_same(tmp_path):
    model, state = systems.four_bar()
    rollouts_agree(model, state, dc.Control(tau=jnp.full((20, 1), 2.0)), tmp_path)


def test_events_are_saved_with_the_model(tmp_path):
    chain = dc.pendulum(3)
    events = dc.Events(chain, ground=-2.5, lines=([[1.0, 0.0]], [[-0.6, 0.8]]), theta_min=-1.0,
                       theta_max=[1.0, 2.0, 3.0], threshold=0.5, max_depth=2, slots=6, rare_share=0.25)
    dc.save(chain, tmp_path / "c.json", events=events)
    assert_same(dc.load(tmp_path / "c.json"), chain)
    assert_same(dc.load_events(tmp_path / "c.json"), events)
    mech = systems.four_bar(stop=1.3)[0]
    mevents = dc.Events(mech, ground=-0.5, contact=["C"])
    dc.save(mech, tmp_path / "m.json", events=mevents)
    assert_same(dc.load_events(tmp_path / "m.json"), mevents)
    text = (tmp_path / "m.json").read_text()
    assert '"theta_min": [1.3, "-inf"' in text and "Infinity" not in text   # (JSON has no infinity: a string)
    single = CHAINS["float32"]()                  # events keep their own dtype (float64 by default)
    for ev in (dc.Events(single, ground=-1.0), dc.Events(single, ground=-1.0, dtype=jnp.float32)):
        dc.save(single, tmp_path / "s.json", events=ev)
        assert_same(dc.load(tmp_path / "s.json"), single)
        assert_same(dc.load_events(tmp_path / "s.json"), ev)
    dc.save(chain, tmp_path / "none.json")
    with pytest.raises(dc.FileFormatError, match="^events: the file holds no events"):
        dc.load_events(tmp_path / "none.json")


def test_polynomial_drivers_and_constants():
    p = dc.Polynomial((0.5, 2.0, -0.25))
    t = jnp.linspace(0.0, 2.0, 5)
    np.testing.assert_allclose(p(t), 0.5 + 2.0 * t - 0.25 * t**2, rtol=1e-15)
    assert p == dc.Polynomial([0.5, 2.0, -0.25]) and hash(p) == hash(dc.Polynomial((0.5, 2.0, -0.25)))
    assert float(dc.Polynomial((3.0,))(jnp.asarray(7.0))) == 3.0
    with pytest.raises(ValueError, match="Polynomial: coefficients must be one or more finite numbers"):
        dc.Polynomial((1.0, np.nan))


def test_a_driver_with_a_python_function_is_refused_by_name(tmp_path):
    mb = dc.MechanismBuilder()
    mb.ground("O", (0, 0)), mb.point("B", (1.0, 0.0)), mb.body("crank", "O", "B", mass=1.0, inertia=0.1)
    mb.drive("crank_drive", "angle", ("O", "B"), lambda t: 0.5 * t)
    with pytest.raises(dc.FileFormatError, match=r"^model\.drivers\[0\]\.f: driver 'crank_drive': its f\(t\) is a "
                       r"Python function \(<lambda>\), which a file cannot hold; give MechanismBuilder\.drive a "
                       r"diffchain\.Polynomial"):
        dc.save(mb.build()[0], tmp_path / "x.json")


def test_models_a_file_cannot_hold_are_refused(tmp_path):
    with pytest.raises(TypeError, match="save: model must be a diffchain.Model"):
        dc.save({"m": [1.0]}, tmp_path / "x.json")
    chain = dc.pendulum(2)
    bad = eqx.tree_at(lambda m: m.dist.L, chain, jnp.asarray([1.0, np.nan]))
    with pytest.raises(dc.FileFormatError, match=r"^model\.dist\.L: nan at \[1\]"):
        dc.save(bad, tmp_path / "x.json")
    mixed = eqx.tree_at(lambda m: m.g, chain, jnp.asarray(9.81, jnp.float32))
    with pytest.raises(dc.FileFormatError, match=r"^model\.g: dtype float32, but the model's float arrays are float64"):
        dc.save(mixed, tmp_path / "x.json")


def edit(doc, where, value):
    """``doc`` with the entry at the JSON path ``where`` (keys and indices) set to ``value`` (None in ``where``'s last
    place deletes it)."""
    doc = json.loads(json.dumps(doc))
    node = doc
    for k in where[:-1]:
        node = node[k]
    if value is _DELETE:
        del node[where[-1]]
    else:
        node[where[-1]] = value
    return doc


_DELETE = object()


@pytest.mark.parametrize("where, value, message", [
    (("model", "bodies", "mass", 2), "abc", r'model\.bodies\.mass\[2\]: expected a finite number, got "abc"'),
    (("model", "m", 0), True, r"model\.m\[0\]: expected a finite number, got true"),
    (("model", "g"), 1e999, r"model\.g: expected a finite number, got Infinity"),
    (("model", "dist", "i", 1), 1.5, r"model\.dist\.i\[1\]: expected an integer, got 1\.5"),
    (("model", "dist", "j", 1), 7, r"model\.dist\.j\[1\]: expected a point index from 0 to P - 1 = 3, got 7"),
    (("model", "motor_idx", 0, 0), -3, r"model\.motor_idx\[0\]\[0\]: expected a point index from -2 .* got -3"),
    (("model", "point_kinds", "guided", 0), 1, r"model\.point_kinds\.guided\[0\]: expected true or false, got 1"),
    (("model", "point_kinds", "s", 1), [0.0], r"model\.point_kinds\.s\[1\]: expected an entry of shape \(2,\) as "
                                              r"model\.point_kinds\.s\[0\], got \(1,\)"),
    (("model", "point_kinds", "c"), [0.0, 0.0], r"model\.point_kinds\.c: expected 1 x 4 entries along axis 0 \(G, "),
    (("model", "m"), [1.0, 1.0], r"model\.bodies\.i\[2\]: expected a point index from 0 to P - 1 = 1, got 2"),
    (("model", "spring_idx"), [1, 2], r"model\.spring_idx: expected an array of 2 dimension\(s\) \(S, 2\), got shape "
                                      r"\[2\]"),
    (("model", "spring_idx"), {"shape": [2, 2]}, r'model\.spring_idx: expected an array .* or an empty one'),
    (("model", "dist", "type"), "Rope", r"model\.dist\.type: expected 'Rod' or 'Distance', got \"Rope\""),
    (("model", "bodies"), [1], r"model\.bodies: expected an object \(Bodies\), got a list"),
    (("model", "bodies", "weight"), 1.0, r"model\.bodies\.weight: unknown field \(a Bodies has i, j, mass"),
    (("model", "m"), _DELETE, r"model\.m: missing"),
    (("model", "m"), None, r"model\.m: expected a value, got null"),
    (("model", "point_names"), [1], r"model\.point_names: expected a list of names"),
    (("model", "nominal_rank"), "x", r'model\.nominal_rank: expected an integer, got "x"'),
    (("model", "limit_lo"), ["-infinity"], r'model\.limit_lo\[0\]: expected a number, "inf" or "-inf", got '),
    (("format_version",), 2, r"format_version: the file is of format version 2, newer than this diffchain reads \(1\)"),
    (("format_version",), "1", r'format_version: expected a positive integer, got "1"'),
    (("format",), "diffchain.trajectory", r"format: expected 'diffchain\.model'"),
    (("dtype",), "float16", r"dtype: expected 'float32' or 'float64', got \"float16\""),
    (("units", "length"), "mm", r"units\.length: diffchain models are in SI units"),
    (("colour",), "red", r"colour: unknown entry"),
    (("events",), {"type": "Events"}, r"events\.z0: missing"),
])
def test_malformed_files_name_the_entry(where, value, message, tmp_path):
    doc = json.loads(fmt.dumps(dc.pendulum(3, link_mass=[1.0, 2.0, 3.0])))
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(edit(doc, where, value)))
    with pytest.raises(dc.FileFormatError, match="^" + message) as e:
        dc.load(path)
    assert isinstance(e.value, dc.InputError) and e.value.path == str(e.value).split(": ")[0]


def test_a_mechanism_driver_entry_names_its_path(tmp_path):
    doc = json.loads(fmt.dumps(CHAINS["mechanism"]()))
    doc["model"]["drivers"][1]["f"]["coefficients"] = []
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(dc.FileFormatError, match=r"^model\.drivers\[1\]\.f\.coefficients: expected a list of one"):
        dc.load(tmp_path / "bad.json")
    doc["model"]["drivers"][1]["kind"] = "twist"
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(dc.FileFormatError, match=r"^model\.drivers\[1\]\.kind: expected one of distance, angle"):
        dc.load(tmp_path / "bad.json")


def test_not_json(tmp_path):
    (tmp_path / "bad.json").write_text("{ not json")
    with pytest.raises(dc.FileFormatError, match="not JSON"):
        dc.load(tmp_path / "bad.json")
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(dc.FileFormatError, match="expected a diffchain model file"):
        dc.load(tmp_path / "list.json")

"""Fuzzing the spec loader and the checker's front end: whatever the YAML or the expression, the only
exception that leaves is an InputError, and the command line turns it into one located line, exit 2.

Three generators: line mutations of the shipped spec and every design of the catalogue (loaded, then
encoded for Z3 and drawn, as ``check`` and ``diagram`` do before solving), random expression trees in
every kind of slot of the small worked example (checked end to end through ``morphcache check``), and
random command lines.
"""

from __future__ import annotations

import io
import re
import shutil
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from morphcache.cli import main
from morphcache.diagrams import diagram_sources
from morphcache.errors import InputError
from morphcache.proofs.system import TransitionSystem
from morphcache.spec.loader import load_spec

ROOT = Path(__file__).resolve().parents[2]
SPEC_DIR = ROOT / "spec"
SOURCES = [SPEC_DIR / "hybrid.yaml", SPEC_DIR / "examples" / "tiny_lease.yaml",
           *sorted((SPEC_DIR / "designs").glob("*.yaml"))]
TINY = (SPEC_DIR / "examples" / "tiny_lease.yaml").read_text(encoding="utf-8")

FUZZ = settings(max_examples=100, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

NASTY = ["012", "1:30", ".inf", ".nan", "~", "[]", "{}", "true", '"x"', "-1", "0", "99999999999999999999",
         "*a", "&a x", "not", "pages", "p + 1", "gen[7]", "tail[p]", "'empty'", "q", "1 // 0", "x[", "{a: 1}",
         "[1, 2]", "all(q for q in pages)", "sum(1 for q in pages)", "frontier", "null", "no", "implies(1, 2)",
         "bogus", "extends", "../hybrid.yaml", "page", "system", "100", "1e400", "0x10", "!!int x", "? [a]"]
CHARS = ["[", "]", "{", "}", ":", '"', "'", "#", "&", "*", "\t", "|", ">", ",", "\x00", "\x85", "é", "%"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the spec folder's layout, so that ``extends: ../hybrid.yaml`` still resolves."""
    root = tmp_path_factory.mktemp("fuzz-specs")
    (root / "designs").mkdir()
    (root / "examples").mkdir()
    shutil.copy(SPEC_DIR / "hybrid.yaml", root / "hybrid.yaml")
    return root


def mutate(text: str, edits: list[tuple[int, int, str, int]]) -> str:
    """Apply line edits ``(line, op, value, column)``: delete, duplicate, replace a value or a word,
    re-indent, insert a character."""
    lines = text.split("\n")
    for where, op, value, col in edits:
        i = where % len(lines)
        line = lines[i]
        if op == 0:
            del lines[i]
        elif op == 1:
            lines.insert(i, line)
        elif op == 2 and ":" in line:
            lines[i] = line[: line.index(":") + 1] + " " + value
        elif op == 3:
            words = line.split(" ")
            words[col % len(words)] = value
            lines[i] = " ".join(words)
        elif op == 4:
            lines[i] = " " * (col % 5) + line.lstrip()
        else:
            k = col % (len(line) + 1)
            lines[i] = line[:k] + CHARS[col % len(CHARS)] + line[k:]
        if not lines:
            lines = [""]
    return "\n".join(lines)


edits = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 5), st.sampled_from(NASTY), st.integers(0, 200)),
                 min_size=1, max_size=3)


def front_end(path: Path) -> None:
    """What ``check`` and ``diagram`` do before the first Z3 query: load, encode, draw."""
    spec = load_spec(path)
    ts = TransitionSystem(spec)
    s0, s1 = ts.state("0"), ts.state("1")
    ts.init(s0)
    ts.domain(s0)
    ts.trans(s0, s1)
    for prop in spec.properties:
        ts.holds(prop, s0)
    diagram_sources(spec)


@FUZZ
@given(source=st.sampled_from(SOURCES), edits=edits)
def test_mutated_catalogue_gives_input_errors_only(workdir: Path, source: Path, edits: list[tuple[int, int, str, int]],
                                                   ) -> None:
    target = workdir / source.relative_to(SPEC_DIR)
    if source.name == "hybrid.yaml":
        target = workdir / "hybrid_mutated.yaml"
    target.write_bytes(mutate(source.read_text(encoding="utf-8"), edits).encode("utf-8", "surrogatepass"))
    try:
        front_end(target)
    except InputError as exc:
        assert "\n" not in str(exc)
        assert re.match(r"^.+:\d+:\d+: \S", str(exc)), str(exc)


LEAVES = ["p", "q", "pages", "MAX_PIN", "pin[p]", "pin[q]", "pin[0]", "pin[5]", "pin[p + 1]", "pin[-1]",
          "residency[p]", "'gpu'", "'evicted'", "'bogus'", "0", "1", "-3", "9223372036854775807",
          "9223372036854775808", "true", "false", "x", "reader[q]", "reader", "1.5", "None", '"s"']
UNARY = ["not {}", "-{}", "({})", "all({} for q in pages)", "sum({} for q in pages)", "any({} for r in pages)",
         "f({})", "{}.x", "[{}]", "lambda: {}", "all({} for q in range(3))"]
BINARY = ["{} + {}", "{} - {}", "{} * {}", "{} // {}", "{} % {}", "{} == {}", "{} != {}", "{} < {}", "{} <= {}",
          "{} and {}", "{} or {}", "implies({}, {})", "{} in {{{}}}", "{}[{}]", "{} ** {}",
          "any({} for q in pages if {})", "{} is {}"]
TERNARY = ["{} if {} else {}", "{} not in {{{}, {}}}"]


def _fill(parts: tuple[str, ...]) -> str:
    return parts[0].format(*parts[1:])


def _extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(st.tuples(st.sampled_from(UNARY), inner).map(_fill),
                     st.tuples(st.sampled_from(BINARY), inner, inner).map(_fill),
                     st.tuples(st.sampled_from(TERNARY), inner, inner, inner).map(_fill))


expressions = st.recursive(st.sampled_from(LEAVES), _extend, max_leaves=10)
SLOTS = [("guard: pin[p] == 0", "guard: {}"), ("guard: pin[p] > 1", "guard: {}"), ("MAX_PIN: 2", "MAX_PIN: {}"),
         ('"pin[p]": "pin[p] + 1"', '"pin[p]": {}'), ("residency: p * 4 < pos", "residency: {}"),
         ("in_place: residency[p] == 'gpu'", "in_place: {}"),
         ("pin: {type: int, min: 0, max: MAX_PIN, init: 0}", "pin: {{type: int, min: 0, max: {}, init: 0}}"),
         ("reading_iff_pinned: all((reader[q] == 'reading') == (pin[q] > 0) for q in pages)",
          "reading_iff_pinned: {}")]


@FUZZ
@given(slot=st.sampled_from(SLOTS), expr=expressions, quoted=st.booleans())
def test_random_expressions_through_check(tmp_path_factory: pytest.TempPathFactory, slot: tuple[str, str], expr: str,
                                          quoted: bool) -> None:
    old, new = slot
    text = '"' + expr.replace("\\", "\\\\").replace('"', '\\"') + '"' if quoted else expr
    path = tmp_path_factory.mktemp("expr") / "case.yaml"
    path.write_text(TINY.replace(old, new.format(text), 1), encoding="utf-8")
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = main(["check", str(path), "--deadline", "60"])
    lines = err.getvalue().splitlines()
    assert code in (0, 1, 2)
    if code != 2 or "UNKNOWN" in out.getvalue():
        assert not lines
    else:
        assert len(lines) == 1 and re.match(rf"^{re.escape(str(path))}:\d+:\d+: \S", lines[0]), lines


TOKENS = ["check", "diagram", "simulate", "{tiny}", "{missing}", "--timeout-ms", "--max-k", "--bmc-depth", "--rlimit",
          "--deadline", "--input-limit", "pages=0", "pages=2", "expr_depth=999", "bogus=1", "x", "-1", "0", "1", "2",
          "1.5", "nan", "--json", "{folder}", "--trace-out", "--frobnicate", "", "--out", "--turns", "--trace",
          "--no-counterexamples", "-v"]


@FUZZ
@given(argv=st.lists(st.sampled_from(TOKENS), max_size=6))
def test_random_command_lines_exit_with_a_code(tmp_path_factory: pytest.TempPathFactory, argv: list[str]) -> None:
    folder = tmp_path_factory.mktemp("argv")
    values = {"{tiny}": str(SPEC_DIR / "examples" / "tiny_lease.yaml"), "{missing}": str(folder / "missing"),
              "{folder}": str(folder)}
    argv = [values.get(a, a) for a in argv]
    if argv[:1] == ["simulate"] and "--trace" not in argv:
        argv += ["--trace", str(folder / "missing.jsonl")]  # keep the engine out of a front-end test
    err, out = io.StringIO(), io.StringIO()
    with redirect_stderr(err), redirect_stdout(out):
        code = main(argv)
    assert code in (0, 1, 2)
    problems = [line for line in err.getvalue().splitlines() if not line.startswith("  .. ")]  # -v progress
    if code == 2 and "UNKNOWN" not in out.getvalue():
        assert len(problems) == 1, problems
        assert re.match(r"^(morphcache( \w+)?: |.+:\d+:\d+: )\S", problems[0]), problems
    else:
        assert not problems, problems

"""The source tree's layout (DESIGN.md, "Layout"): no import cycle, each module imports only its
own floor or the floors below it, and no module is longer than :data:`MAX_LINES` lines.

The module graph is read statically (``ast``, nothing imported) from every module of the import
packages forge, actors, serve, rewards and tasks. A package's ``__init__`` is a node of its own.
An import anywhere in a module is an edge, inside a function too (an import deferred to a call
is still a dependency: deferring it hides a cycle, it does not break it), except under
``if TYPE_CHECKING:`` (never run). Edges:

- ``import a.b.c`` and ``from a.b.c import x``: to ``a``, ``a.b`` and ``a.b.c`` (Python runs each
  enclosing package's ``__init__`` first); ``from a.b import c`` where ``c`` is a submodule: to
  ``a.b`` and ``a.b.c``.
- But a module's own enclosing packages are already being imported when its code runs, so
  reaching a sibling through them (``from a.b import c`` or ``from a.b.c import x`` in ``a.b.d``)
  does not re-enter them; only taking a name that is not a submodule from one (``from a.b import
  X``, ``import a.b``) is an edge to it. A package's ``__init__`` that imports a submodule which
  takes a name from that ``__init__`` is a cycle; one that re-exports submodules is not.

The cycle test reads a stricter graph (``strict=True``): imports under ``TYPE_CHECKING`` count
(the types still tie the two modules together), and so does naming one's own package in
``from a.b import c`` (a module that imports its package back, as the package's ``__init__``
imports it). On the tree before this test existed it found every cycle named when the layout
was reorganised; the floors are checked on the runtime graph.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("forge", "actors", "serve", "rewards", "tasks")
MAX_LINES = 400
# Modules allowed over MAX_LINES, each with the reason it is not split.
LONG_MODULES: dict[str, str] = {
    "actors/scheduler.py": "one actor class (447 lines, 40 of them the invariants it keeps) "
    "whose dispatch loop and settle path share its queue, in-flight calls and groups; what "
    "stands apart is already out (actors.attempts: groups, attempts, ledger, outbox; "
    "actors.scheduler_report: its counts and stall report; actors.pod_pool: the pods); "
    "splitting the class would take a mixin over shared state",
}

# Bottom to top. A module's floor is that of the longest pattern naming it: ``x.*`` is package x
# and everything in it, ``x`` the module x alone. A module imports only its floor and those below.
FLOORS: list[tuple[str, tuple[str, ...]]] = [
    (
        "core: the records shared by everything, Python and Ray set-up",
        (
            "forge",
            "forge.types",
            "forge.trajectory",
            "forge.transcript",
            "forge.rng",
            "forge.episode_images",
            "forge.cluster",
            "forge.stages",
        ),
    ),
    (
        "serve: wire protocols, engines, models (not yet the Policy deployment)",
        ("serve.*",),
    ),
    (
        "parts: sandboxes (their agent and the local backend), harness adapters, sandbox images, "
        "tasks and their services, verifiers",
        ("forge.sandboxes.*", "forge.harnesses.*", "forge.images.*", "tasks.*", "rewards.*"),
    ),
    (
        "config: the run's configuration, which names and checks the parts (a harness and its "
        "options, task limits)",
        ("forge.config.*",),
    ),
    (
        "runtime: what a run builds from its configuration: the docker and kubernetes backends, "
        "the Policy deployment, one attempt start to finish and how it ended, the tasks it plays",
        (
            "forge.sandboxes.docker",
            "forge.sandboxes.kubernetes",
            "forge.sandboxes.kube_api",
            "forge.sandboxes.registry",
            "serve.policy",
            "forge.outcome",
            "forge.episode",
            "forge.provenance",
            "forge.task_set",
        ),
    ),
    (
        "train and observe: the training math and veRL glue, analyses, metrics, loggers, viewer",
        ("forge.train.*", "forge.observe.*"),
    ),
    ("actors: HarnessPod, Scheduler, ReplayBuffer, the Trainers", ("actors.*",)),
    (
        "commands: the forge command and what its subcommands run (a run, an evaluation, a "
        "collection, SFT and the student outside a run)",
        (
            "forge.cli",
            "forge.commands",
            "forge.driver",
            "forge.evaluate",
            "forge.eval_scores",
            "forge.eval_matrix",
            "forge.served_judge",
            "forge.collect",
            "forge.train.sft",
            "forge.train.student",
        ),
    ),
]


def module_files(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Dotted name -> (file, is a package's ``__init__``) of every module of :data:`PACKAGES`."""
    out: dict[str, tuple[Path, bool]] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            is_init = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_init else parts)] = (path, is_init)
    return out


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, strict: bool = False) -> Iterator[ast.Import | ast.ImportFrom]:
    todo = [tree]
    while todo:
        node = todo.pop()
        if not strict and isinstance(node, ast.If) and _type_checking(node.test):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        todo.extend(ast.iter_child_nodes(node))


def edges_of(
    name: str, path: Path, is_init: bool, modules: set[str], strict: bool = False
) -> set[str]:
    """The modules of ``modules`` that module ``name`` imports (see the module docstring)."""
    own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
    if is_init:
        own.add(name)
    out: set[str] = set()

    def reach(dotted: str, whole: bool) -> None:
        """Importing ``dotted``: its enclosing packages unless ours, itself if ``whole`` or not
        ours."""
        parts = dotted.split(".")
        for i in range(1, len(parts)):
            prefix = ".".join(parts[:i])
            if prefix not in own:
                out.add(prefix)
        if whole or dotted not in own:
            out.add(dotted)

    for node in _imports(ast.parse(path.read_text(), str(path)), strict):
        if isinstance(node, ast.Import):
            for alias in node.names:
                reach(alias.name, whole=True)
            continue
        if node.level:
            base = name.split(".") if is_init else name.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        subs = [a.name for a in node.names if f"{source}.{a.name}" in modules]
        takes_names = len(subs) < len(node.names)
        reach(source, whole=takes_names or strict)
        for sub in subs:
            out.add(f"{source}.{sub}")
    return {m for m in out if m in modules and m != name}


def module_graph(root: Path = ROOT, strict: bool = False) -> dict[str, set[str]]:
    files = module_files(root)
    names = set(files)
    return {name: edges_of(name, path, init, names, strict) for name, (path, init) in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def a_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the first module of ``component``, as a path."""
    inside = set(component)
    start = component[0]
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & inside):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    nxt.append(child)
        frontier = nxt
    return component


def floor_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (pattern length, floor)
    for floor, (_, patterns) in enumerate(FLOORS):
        for pattern in patterns:
            package = pattern.removesuffix(".*")
            hit = module == package or (pattern.endswith(".*") and module.startswith(package + "."))
            if hit and (best is None or len(package) > best[0]):
                best = (len(package), floor)
    return None if best is None else best[1]


def test_no_import_cycle() -> None:
    graph = module_graph(strict=True)
    found = cycles(graph)
    report = [
        f"{len(c)} modules: {', '.join(c)}\n    e.g. {' -> '.join(a_cycle(graph, c))}"
        for c in found
    ]
    assert not found, f"{len(found)} import cycle(s):\n  " + "\n  ".join(report)


def test_every_module_has_a_floor() -> None:
    missing = [m for m in sorted(module_files()) if floor_of(m) is None]
    assert not missing, f"modules on no floor (add them to FLOORS): {missing}"


def test_modules_import_only_their_floor_and_below() -> None:
    graph = module_graph()
    wrong = []
    for module, targets in sorted(graph.items()):
        mine = floor_of(module)
        for target in sorted(targets):
            theirs = floor_of(target)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append(
                    f"{module} ({FLOORS[mine][0].split(':')[0]}) imports {target} "
                    f"({FLOORS[theirs][0].split(':')[0]})"
                )
    assert not wrong, f"{len(wrong)} import(s) from a higher floor:\n  " + "\n  ".join(wrong)


def test_no_module_is_too_long() -> None:
    long = {}
    for path, _ in module_files().values():
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and str(path.relative_to(ROOT)) not in LONG_MODULES:
            long[str(path.relative_to(ROOT))] = lines
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


def test_the_graph_reader_follows_python(tmp_path: Path) -> None:
    """The edge rules on a small tree: an ``__init__`` that takes a name back from a submodule it
    imports is a cycle; one that re-exports submodules importing their siblings is not; imports
    under TYPE_CHECKING are no edges; a function's imports are."""
    files = {
        "forge/__init__.py": "",
        "forge/a/__init__.py": "from forge.a.x import X\nfrom .y import Y\n",
        "forge/a/x.py": "from forge.a import y\nfrom forge.a.y import Y\nX = 1\n",
        "forge/a/y.py": "Y = 2\n",
        "forge/b/__init__.py": "from forge.b.p import P\nNAME = 1\n",
        "forge/b/p.py": "from forge.b import NAME\nP = NAME\n",
        "forge/c.py": (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from forge.d import D\n"
            "def f():\n    from forge.a.y import Y\n"
        ),
        "forge/d.py": "import forge.c\nD = 0\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    for package in PACKAGES[1:]:
        (tmp_path / package).mkdir()
    graph = module_graph(tmp_path)
    assert graph["forge.a"] == {"forge.a.x", "forge.a.y"}
    assert graph["forge.a.x"] == {"forge.a.y"}
    assert graph["forge.b"] == {"forge.b.p"} and graph["forge.b.p"] == {"forge.b"}
    assert graph["forge.c"] == {"forge.a", "forge.a.y"}
    assert graph["forge.d"] == {"forge.c"}
    assert cycles(graph) == [["forge.b", "forge.b.p"]]
    strict = module_graph(tmp_path, strict=True)  # what the cycle test reads
    assert strict["forge.a.x"] == {"forge.a", "forge.a.y"}  # its package, imported back
    assert strict["forge.c"] == {"forge.a", "forge.a.y", "forge.d"}  # TYPE_CHECKING too
    assert sorted(map(sorted, cycles(strict))) == [
        ["forge.a", "forge.a.x"],
        ["forge.b", "forge.b.p"],
        ["forge.c", "forge.d"],
    ]

"""The package's shape: imports go down the layers docs/architecture.md states, no module imports
in a cycle, and the model and the translator are free of libraries they do not use."""

import ast
import os
import subprocess
import sys

import pytest

from conftest import ROOT, run_cli, subprocess_env

PACKAGE = os.path.join(ROOT, "mt_transformer")

# The package's parts by layer, lowest first (docs/architecture.md): a module imports from its own
# part, from parts of lower layers, and from nothing above.
LAYERS = [
    {"errors", "files", "host", "outputs", "processes", "signals", "special_tokens"},
    {"config", "devices"},
    {"data"},
    {"model"},
    {"checkpoint"},
    {"evaluation"},
    {"decoding", "jobs"},
    {"exchange", "markup"},
    {"training", "serve", "translation_model"},
    {"cli"},
]


def modules() -> dict[str, str]:
    """Dotted module name -> path, for every module of the package."""
    found = {}
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                dotted = os.path.relpath(path, ROOT)[: -len(".py")].replace(os.sep, ".")
                found[dotted.removesuffix(".__init__")] = path
    return found


def imports(path: str, known: set[str]) -> set[str]:
    """The package's modules that a file imports, at the top or inside functions."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & known
            names.update(submodules)
            if len(submodules) < len(node.names):  # a name defined by the module itself, not a submodule
                names.add(node.module)
    return {name for name in names if name in known}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state, path = {}, []

    def visit(node):
        state[node] = "open"
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def subpackage(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 else module


def layer(module: str) -> int:
    """The layer of a module of the package, by its part (mt_transformer.data.corpus: data); the
    package itself is the Python API, translation_model's layer: `import mt_transformer as mt`
    reaches everything mt.load does."""
    if module == "mt_transformer":
        return layer("mt_transformer.translation_model")
    part = module.split(".")[1]
    for level, parts in enumerate(LAYERS):
        if part in parts:
            return level
    raise AssertionError(f"{module}: its part {part!r} has no layer in LAYERS (docs/architecture.md)")


def test_imports_go_down_the_layers():
    found = modules()
    upward = sorted(
        f"{module} imports {target}"
        for module, path in found.items()
        for target in imports(path, set(found))
        if layer(target) > layer(module)
    )
    assert not upward, upward


def imports_between(part: str, other: str) -> set[str]:
    """Every import of a module of `part` (mt_transformer.model) from a module of `other`."""
    found = modules()
    return {
        f"{module} imports {target}"
        for module, path in found.items()
        if module.startswith(part)
        for target in imports(path, set(found))
        if target.startswith(other)
    }


def test_the_model_imports_nothing_of_data():
    """The paper's model reads the model config and the special-token ids, never the data pipeline."""
    reached = imports_between("mt_transformer.model", "mt_transformer.data")
    assert not reached, reached


def test_exchange_sits_beside_decoding_not_under_it():
    """Exports (Argos, transformers) build on the CTranslate2 conversion decoding runs on; decoding
    imports no exchange format."""
    reached = imports_between("mt_transformer.decoding", "mt_transformer.exchange")
    assert not reached and layer("mt_transformer.exchange") > layer("mt_transformer.decoding"), reached


def test_the_layer_check_sees_an_import_of_the_package_itself(tmp_path):
    """`import mt_transformer as mt` in a lower layer runs back up to the API, and so round a cycle."""
    path = tmp_path / "m.py"
    path.write_text("def f():\n    import mt_transformer as mt\n\n    return mt.load\n", encoding="utf-8")
    found = modules()
    (target,) = imports(str(path), set(found))
    assert layer(target) > layer("mt_transformer.exchange.argos_check")
    graph = {m: imports(p, set(found)) - {m} for m, p in found.items()}
    graph["mt_transformer.decoding.translator"] = graph["mt_transformer.decoding.translator"] | {target}
    assert find_cycle(graph) is not None


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """A module of the data layer that imports the decoding layer is what the check above reports."""
    path = tmp_path / "m.py"
    path.write_text("from mt_transformer.decoding.translator import Translator\n", encoding="utf-8")
    (target,) = imports(str(path), set(modules()))
    assert layer(target) > layer("mt_transformer.data.corpus")


def test_no_import_cycles_between_modules_or_subpackages():
    found = modules()
    graph = {m: imports(p, set(found)) - {m} for m, p in found.items()}
    assert find_cycle(graph) is None, find_cycle(graph)
    packages = {}
    for module, targets in graph.items():
        packages.setdefault(subpackage(module), set()).update(subpackage(t) for t in targets)
    packages = {p: t - {p} for p, t in packages.items()}
    assert find_cycle(packages) is None, find_cycle(packages)


@pytest.mark.parametrize(
    "module,absent",
    [
        ("mt_transformer.model.transformer", ("sentencepiece",)),
        ("mt_transformer.decoding.translator", ("datasets", "sacrebleu")),
    ],
)
def test_a_module_does_not_pull_in_what_it_does_not_use(module, absent):
    assert imported_in_a_fresh_process(f"import {module}", absent) == []


def imported_in_a_fresh_process(code: str, modules: tuple[str, ...], *args: str) -> list[str]:
    """Which of `modules` running `code` in a fresh Python process imports."""
    code = f"import sys\n{code}\nprint(' '.join(m for m in {modules!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=ROOT, check=True, env=subprocess_env()
    )
    return result.stdout.split()


def test_mt_translate_on_a_ctranslate2_conversion_runs_without_torch(trained_run, tmp_path):
    """torch is imported only where our engine runs, a model is converted, or a GPU may be used: a
    translation on CTranslate2 starts in a fraction of torch's import time."""
    (tmp_path / "in.txt").write_text("a red apple\n", encoding="utf-8")
    args = ["--checkpoint", trained_run, "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.txt")]
    assert run_cli("mt-translate", *args).returncode == 0  # converted (with torch), into the suite's cache
    os.remove(tmp_path / "out.txt")
    translate = "from mt_transformer.cli import translate_main\ntry: translate_main(sys.argv[1:])\nexcept SystemExit: 0"
    assert imported_in_a_fresh_process(translate, ("torch", "ctranslate2"), *args) == ["ctranslate2"]
    assert len(open(tmp_path / "out.txt", encoding="utf-8").read().splitlines()) == 1


def test_reading_the_lines_to_translate_does_not_import_sacrebleu(tmp_path):
    (tmp_path / "in.txt").write_text("eins\nzwei\n", encoding="utf-8")
    read = "from mt_transformer.data.text import stream_lines; list(stream_lines(sys.argv[1]))"
    assert imported_in_a_fresh_process(read, ("sacrebleu",), str(tmp_path / "in.txt")) == []
    # the check can fail
    assert imported_in_a_fresh_process("import mt_transformer.evaluation.scores", ("sacrebleu",)) == ["sacrebleu"]

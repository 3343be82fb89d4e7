"""The shape of the recipes' code, read with `ast` (no import): every function short, and
no import cycle among the modules of `recipes/`."""

import ast
import os

from conftest import REPO_ROOT

RECIPES = os.path.join(REPO_ROOT, "recipes")
MAX_FUNCTION_LINES = 60


def _modules():
    """{dotted module name: parsed tree} of every .py file under recipes/."""
    modules = {}
    for directory, _, names in os.walk(RECIPES):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            dotted = os.path.relpath(path[:-3], REPO_ROOT).replace(os.sep, ".")
            dotted = dotted[: -len(".__init__")] if dotted.endswith(".__init__") else dotted
            with open(path, encoding="utf-8") as f:
                modules[dotted] = ast.parse(f.read(), filename=path)
    return modules


def _code_lines(function):
    """Lines from `def` to the last line, without the docstring: documenting every argument
    should never be what pushes a function over the limit."""
    lines = function.end_lineno - function.lineno + 1
    first = function.body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)):
        lines -= first.end_lineno - first.lineno + 1
    return lines


def long_functions(modules, limit=MAX_FUNCTION_LINES):
    return sorted(
        f"{module}.{node.name} (line {node.lineno}): {_code_lines(node)} lines"
        for module, tree in modules.items()
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and _code_lines(node) > limit
    )


def import_graph(modules):
    """{module: the recipes modules it imports}, imports inside functions included."""
    graph = {}
    for module, tree in modules.items():
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from recipes.bert import chunks` imports the module recipes.bert.chunks;
                # `from recipes.common.errors import UserError` the module itself.
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    imported.add(submodule if submodule in modules else node.module)
        graph[module] = sorted(name for name in imported if name in modules and name != module)
    return graph


def find_cycle(graph):
    """One import cycle as [a, b, ..., a], or None."""
    state, stack = {}, []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for target in graph[module]:
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state:
                cycle = visit(target)
                if cycle:
                    return cycle
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state:
            cycle = visit(module)
            if cycle:
                return cycle
    return None


def test_no_function_in_recipes_is_longer_than_60_lines():
    assert long_functions(_modules()) == []


def _function(statements, docstring_lines=0):
    docstring = '    """' + "\n" * docstring_lines + '"""\n' if docstring_lines else ""
    body = "".join(f"    x{i} = {i}\n" for i in range(statements))
    return ast.parse(f"def f():\n{docstring}{body}")


def test_long_function_check_counts_code_lines_not_the_docstring():
    # `def` + 59 statements: 60 lines, however long the docstring; one more is too long.
    assert long_functions({"m": _function(59)}) == []
    assert long_functions({"m": _function(59, docstring_lines=30)}) == []
    assert long_functions({"m": _function(60)}) == ["m.f (line 1): 61 lines"]
    assert long_functions({"m": _function(60, docstring_lines=30)}) == [
        "m.f (line 1): 61 lines"]


def test_no_import_cycle_among_recipes_modules():
    assert find_cycle(import_graph(_modules())) is None


def test_import_cycle_check_finds_a_cycle_through_a_function_level_import():
    modules = {
        "recipes.a": ast.parse("from recipes import b\n"),
        "recipes.b": ast.parse("def f():\n    from recipes.c import g\n"),
        "recipes.c": ast.parse("import recipes.a\n"),
        "recipes": ast.parse(""),
    }
    assert find_cycle(import_graph(modules)) == ["recipes.a", "recipes.b", "recipes.c",
                                                 "recipes.a"]


MAX_PROGRAM_LINES = 150


def _hands_a_task_to_the_driver(tree):
    """Whether the module's top level has an `if __name__ == "__main__":` block calling
    `driver.main(...)` (read from the tree, so a docstring showing that block is not one;
    a program may have another such block at its top: `startup.check_command_line`)."""
    for node in tree.body:
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Compare)
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__"
                and any(isinstance(c, ast.Constant) and c.value == "__main__"
                        for c in node.test.comparators)
                and any(isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                        and call.func.attr == "main" and isinstance(call.func.value, ast.Name)
                        and call.func.value.id == "driver"
                        for statement in node.body for call in ast.walk(statement))):
            return True
    return False


def recipe_programs():
    """{path: line count} of every recipe program: a module whose `__main__` hands a task to
    the shared driver (`driver.main(`)."""
    programs = {}
    for module, tree in _modules().items():
        if _hands_a_task_to_the_driver(tree):
            path = module.replace(".", "/") + ".py"
            with open(os.path.join(REPO_ROOT, path), encoding="utf-8") as f:
                programs[path] = f.read().count("\n")
    return programs


def test_each_recipe_program_is_a_page():
    programs = recipe_programs()
    # the three programs on the driver: pretraining, ResNet, fine-tuning
    assert {"recipes/bert/pretrain.py", "recipes/resnet/train.py",
            "recipes/bert/finetune.py"} <= set(programs)
    assert {path: lines for path, lines in programs.items()
            if lines >= MAX_PROGRAM_LINES} == {}

"""Compile a stdin program so that its top-level statements run as a function body.

Stdlib only and free of package imports: the sandbox child loads this file directly.

Why: LiveCodeBench's harness runs a stdin program's top-level statements inside a function,
where names are fast locals; as a plain script they are module globals (dictionary lookups),
and heavy top-level loops run much slower. We get the same speed while keeping script semantics
that the official wrapping breaks:

* every name that some function declares ``global`` stays a module global (the wrapper
  declares it ``global`` too), so ``global`` keeps working;
* the module is still ``__main__``, so ``if __name__ == "__main__":`` runs wherever it stands;
* a top-level name that shadows a builtin or prelude name (``input = sys.stdin.readline``)
  starts out as that builtin/prelude value, so reading it before the assignment still works;
* ``from __future__`` and ``from m import *`` (not allowed inside a function) stay at module
  level, ahead of the function;
* programs that look at module scope by name (``globals()``, ``locals()``, ``vars()``, ``dir()``,
  ``eval``/``exec``, ``import __main__``, pickling) run unwrapped, as plain scripts.

Syntax errors are those of the plain script: the source is compiled as a module first.

Only where the module's own code loops (a ``for`` or ``while`` outside every function): elsewhere
each top-level statement runs once, names looked up once cost nothing worth saving, and the
program runs as the plain script. That is most programs (``def main(): ...`` then ``main()``),
and for them the syntax tree is never built: in a freshly forked process its machinery costs
about a millisecond (memory pages first written there), several times the compile itself.
"""

from __future__ import annotations

import ast
import opcode
import types

WRAPPER = "_lcb_main_"
SEED = "_lcb_seed_"
_SCOPE_READERS = frozenset({"globals", "locals", "vars", "dir", "eval", "exec", "__import__",
                            "breakpoint"})
_SCOPE_MODULES = frozenset({"__main__", "pickle", "_pickle", "cPickle", "dill", "cloudpickle",
                            "multiprocessing", "concurrent", "copyreg", "shelve", "inspect"})


# Every loop's back edge is one of these (3.11: JUMP_BACKWARD, its no-interrupt form, and the
# backward conditional jumps a `while` may end with); later versions have fewer of them.
_BACKWARD_JUMPS = frozenset(code for name, code in opcode.opmap.items() if "JUMP_BACKWARD" in name)


def _loops_at_top_level(code: types.CodeType) -> bool:
    """Whether the module's own bytecode (not its functions', classes' or comprehensions')
    jumps backwards: only a loop does. Opcodes are the even bytes of the word code."""
    return not _BACKWARD_JUMPS.isdisjoint(code.co_code[::2])


def _reads_module_scope(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id in _SCOPE_READERS:
            return True
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] in _SCOPE_MODULES for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in _SCOPE_MODULES:
            return True
        if isinstance(node, ast.Attribute) and node.attr in ("f_globals", "f_locals", "__globals__"):
            return True
    return False


_SCOPE_ATTRIBUTES = frozenset({"f_globals", "f_locals", "__globals__"})
_SCOPE_TRIGGERS = _SCOPE_READERS | _SCOPE_MODULES | _SCOPE_ATTRIBUTES


def _identifiers(code: types.CodeType) -> set[str]:
    """Every name the compiled program uses (variables of every scope, attributes, imported
    modules, dotted ones also by their first part): a superset of the names the tree walk of
    ``_reads_module_scope`` looks for, except in code the compiler dropped as unreachable."""
    found: set[str] = set()
    pending = [code]
    while pending:
        current = pending.pop()
        found.update(current.co_names, current.co_varnames, current.co_cellvars, current.co_freevars)
        pending.extend(const for const in current.co_consts if isinstance(const, types.CodeType))
    found.update([name.split(".", 1)[0] for name in found if "." in name])
    return found


def _declared_global(body: list[ast.stmt]) -> set[str]:
    """Names some ``global`` statement declares. It is a statement, so only statement lists are
    searched (bodies, branches, handlers, match cases), not the expressions: a fraction of the nodes."""
    found: set[str] = set()
    pending: list = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Global):
            found.update(node.names)
            continue
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            block = getattr(node, field, None)
            if isinstance(block, list):
                pending.extend(block)
    return found


def _stays_at_module_level(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and (
        stmt.module == "__future__" or any(alias.name == "*" for alias in stmt.names))


def _top_level_bindings(body: list[ast.stmt]) -> set[str]:
    """Names the top-level statements bind (they become the wrapper's locals). Nested function,
    class, lambda and comprehension scopes bind their own names, not these."""
    found: set[str] = set()
    pending: list[ast.AST] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(node.name)
            pending.extend(node.decorator_list)
            continue
        if isinstance(node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            found.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            found.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
        elif isinstance(node, ast.ExceptHandler) and node.name:
            found.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            found.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            found.add(node.rest)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _function(body: list[ast.stmt]) -> ast.FunctionDef:
    """``def _lcb_main_(): <body>``."""
    function = ast.FunctionDef(
        name=WRAPPER, args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[],
                                         defaults=[]),
        body=body, decorator_list=[], returns=None, type_comment=None)
    function.lineno, function.col_offset = 1, 0
    return function


def compile_program(source: str, filename: str, *, known_names: frozenset[str] = frozenset(),
                    wrap: bool = True):
    """The code object to exec in a fresh ``__main__`` namespace.

    ``known_names``: names the namespace already holds when the code runs (prelude, builtins);
    a top-level binding of one of them is seeded with that value. Returns (code, wrapped).
    """
    plain = compile(source, filename, "exec", dont_inherit=True)
    if not wrap or not _loops_at_top_level(plain):
        return plain, False
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return plain, False
    # The full tree walk only where the compiled program names one of the things it looks for
    # (a few programs): it costs more than compiling.
    if not _identifiers(plain).isdisjoint(_SCOPE_TRIGGERS) and _reads_module_scope(tree):
        return plain, False
    hoisted = [s for s in tree.body if _stays_at_module_level(s)]
    body = [s for s in tree.body if not _stays_at_module_level(s)]
    if not body:
        return plain, False
    declared = _declared_global(tree.body) if "global" in source else set()
    try:
        seeded = sorted((_top_level_bindings(body) - declared) & known_names)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return plain, False
    prologue: list[ast.stmt] = []
    if declared:
        prologue.append(ast.Global(names=sorted(declared)))
    if seeded:  # e.g. `n = int(input()); input = sys.stdin.readline`: input starts as the builtin
        prologue.append(ast.Assign(
            targets=[ast.Tuple(elts=[ast.Name(n, ast.Store()) for n in seeded], ctx=ast.Store())],
            value=ast.Call(ast.Name(SEED, ast.Load()), [ast.Constant(n) for n in seeded], [])))
    function = _function(prologue + body)
    call = ast.Expr(ast.Call(ast.Name(WRAPPER, ast.Load()), [], []))
    module = ast.Module(body=hoisted + [function, call], type_ignores=[])
    # Line 1 for the nodes made here (what ast.fix_missing_locations would give them, without
    # walking the program's own nodes, which have their places already: that walk costs more
    # than compiling).
    for created in [function, call, *prologue]:
        for node in [created] if created is function else ast.walk(created):
            if "lineno" in node._attributes:
                node.lineno = node.end_lineno = 1
                node.col_offset = node.end_col_offset = 0
    try:
        return compile(module, filename, "exec", dont_inherit=True), True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return plain, False


def seed_function(namespace: dict):
    """The ``_lcb_seed_`` helper for ``namespace``: current values of the named names."""
    import builtins

    def seed(*names):
        values = []
        for name in names:
            if name in namespace:
                values.append(namespace[name])
            else:
                values.append(getattr(builtins, name))
        return tuple(values)

    return seed

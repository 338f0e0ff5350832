"""NM251: torch_xla's profiler annotations become torch.profiler's. NM257: its profiling server goes where nothing
else reads it, with a marker that says what records a profile now (or names the environment variable that
switched the server on, which does nothing any more). NM249: a capture that the rest of its block follows
(`xp.trace_detached(...)` then the training) becomes a torch.profiler profile started there and stopped after the
block's last statement. NM237: any other capture from that server (`xp.trace`, a capture in an expression, at the
end of its block) is marked once, with the torch.profiler block that replaces the pair, and the server stays for
it."""

from __future__ import annotations

import libcst as cst

from neuron_migrate.catalogue import rule as catalogue_rule
from neuron_migrate.rules import Rule, names_pattern
from neuron_migrate.engine.edits import marker_room, marker_text
from neuron_migrate.engine.names import dotted_str
from neuron_migrate.rules.patterns import arg, code, reads_of, reads_setting, short, string_value
from neuron_migrate.rules.rewrites import free_name, only_args, replace_statement
from neuron_migrate.syntax.parse import expression

PROFILER = "torch_xla.debug.profiler"
TRACE = frozenset({f"{PROFILER}.Trace"})
STEP_TRACE = frozenset({f"{PROFILER}.StepTrace"})
SERVER = frozenset({f"{PROFILER}.start_server"})
DETACHED = f"{PROFILER}.trace_detached"
CAPTURE = frozenset({DETACHED, f"{PROFILER}.trace"})


class Profiler(Rule):
    """`with xp.Trace(name):` / `with xp.StepTrace(name, step_num=...):` name a span of the profile:
    `torch.profiler.record_function(name)` does (StepTrace also ran the step's graph on exit, which the eager
    backend does not need). `server = xp.start_server(port)` served the XLA profiler to TensorBoard's capture:
    torch.profiler records in the process, so the statement goes where nothing reads the server (NM257), and a
    marker says so where it was."""

    codes = ("NM251", "NM237", "NM249", "NM257")
    triggers = (b"profiler",)
    pattern = names_pattern({"Trace", "StepTrace", "start_server", "trace_detached", "trace"})
    torch_xla_names_only = True  # every call it reports is one of `PROFILER`'s

    def __init__(self, ctx) -> None:
        super().__init__(ctx)
        self.servers: list[tuple] = []  # (occurrence, call): decided in finish, once every capture is known
        self.captured = False  # the file captures a profile from the server that a person moves (NM237)
        self.spent: dict[str, int] = {}  # names read by the captures NM249 removed: their reads no longer count
        self.windowed = False  # a capture became a torch.profiler profile (NM249): the file still records one

    def visit_Call(self, node: cst.Call) -> None:
        ctx = self.ctx
        qual = ctx.qualname(node.func)
        if qual in TRACE or qual in STEP_TRACE:
            self._span(node, qual in STEP_TRACE)
        elif qual in SERVER:
            self.servers.append((ctx.current, node))
        elif qual in CAPTURE and not self._window(node):
            self.captured = True
            self._capture(node)

    def finish(self) -> None:
        ctx = self.ctx
        for occ, node in self.servers:
            ctx.current = occ
            if self.captured:
                ctx.handled.update((node, node.func))  # the capture's marker names it (one marker, not two)
            else:
                self._server(node)
        ctx.current = None

    def _capture(self, node: cst.Call) -> None:
        """`xp.trace_detached(address, logdir, duration_ms=...)` asked the process's profiling server for a
        profile: the native profile is recorded in the process by a `torch.profiler.profile` block around the
        steps to capture, which a person places. One marker, naming the block; the server stays for the capture."""
        logdir = arg(node, 1, "logdir")
        folder = code(logdir.value) if logdir is not None else "logdir"
        self.ctx.report("NM237", node, call=short(node), logdir=folder)

    def _window(self, node: cst.Call) -> bool:
        """NM249: `xp.trace_detached(address, logdir, duration_ms=...)` alone on its line, followed in its block by
        the statements it was placed to profile (the training), becomes a torch.profiler profile started where the
        capture was and stopped after the block's last statement, written to the same folder for TensorBoard. The
        server it captured from goes too (NM257), and the constants only the pair read. Unsafe: the profile covers
        the rest of the block, not `duration_ms` of it."""
        ctx = self.ctx
        occ = ctx.current
        logdir = arg(node, 1, "logdir")
        given = [arg(node, i, n) for i, n in enumerate(("service_addr", "logdir", "duration_ms"))]
        if ctx.qualname(node.func) != DETACHED or logdir is None or given[0] is None or not only_args(
                node, *given, *[a for a in node.args if a.keyword is not None and a.keyword.value in _DROPPED]):
            return False
        statement = occ.statement
        small = occ.small
        if type(small) is not cst.Expr or small.value is not node or type(statement) is not cst.SimpleStatementLine \
                or len(statement.body) != 1:
            return False
        block = ctx.analysis.parents.get(statement)
        body = list(block.body) if isinstance(block, (cst.IndentedBlock, cst.Module)) else []
        rest = body[body.index(statement) + 1:] if statement in body else []
        if not rest or any(isinstance(s, (cst.FunctionDef, cst.ClassDef)) for s in rest) \
                or not (dotted_str(logdir.value) or reads_setting(logdir.value)):
            return False
        name = free_name(ctx, "profiler")
        tp = ctx.module_ref("torch.profiler")
        # one argument a line, one indentation unit in (LibCST puts the block's own indentation before each)
        inner = ctx.module.default_indent
        start = (f"{name} = {tp}.profile(\n"
                 f"{inner}activities=[{tp}.ProfilerActivity.CPU, {tp}.ProfilerActivity.PrivateUse1],\n"
                 f"{inner}on_trace_ready={tp}.tensorboard_trace_handler({code(logdir.value)}),\n)")
        if not ctx.report("NM249", node, call=short(node), logdir=code(logdir.value), name=name):
            return True
        self.windowed = True
        replace_statement(ctx, statement, lambda _call: [start, f"{name}.start()"])
        ctx.insert_after(rest[-1], f"{name}.stop()\n")
        for a in given[0::2]:  # the address and the duration are read no more (the folder is)
            if a is not None:
                for part in _names(a.value):
                    self.spent[part] = self.spent.get(part, 0) + 1
                self._drop_constant(a.value, occ.scope)
        return True

    def _drop_constant(self, value: cst.BaseExpression, scope) -> None:
        """A function's `duration_ms = 30000` that only the removed capture read goes with it (F841 otherwise)."""
        if type(value) is cst.Name:
            assignment = self._only_reader(value.value, scope, 0)
            if assignment:
                self.ctx.remove(assignment)

    def _span(self, node: cst.Call, step: bool) -> None:
        ctx = self.ctx
        occ = ctx.current
        name = arg(node, 0, "name")
        extra = (arg(node, 1, "step_num"),) if step else ()
        if name is None or not only_args(node, name, *extra):
            return  # annotations passed as keywords: by hand (NM199)
        if type(occ.parent) is not cst.WithItem or occ.parent.item is not node:
            return  # a trace object kept or entered by hand
        recorder = f"{ctx.module_ref('torch.profiler')}.record_function"

        def build(call: cst.Call) -> cst.BaseExpression:
            return expression(f"{recorder}({code(arg(call, 0, 'name').value)})")

        if ctx.report("NM251", node, call=short(node), fixed=short(build(node))):
            ctx.replace(node, build)

    def _server(self, node: cst.Call) -> None:
        ctx = self.ctx
        occ = ctx.current
        small = occ.small
        if type(small) is cst.Expr and small.value is node:
            pass
        elif type(small) is cst.Assign and small.value is node and len(small.targets) == 1 \
                and type(small.targets[0].target) is cst.Name:
            if self._read_elsewhere(small.targets[0].target.value, occ.scope):
                return  # the server is passed on or stopped: by hand (NM199)
        else:
            return
        port = self._port_assignment(node, occ.scope)
        if port is False:
            return  # the port is computed by a call that may do something: by hand (NM199)
        gate = self._gate(occ, port)
        variable = next(iter(_variables(ctx, gate.test)), None) if gate is not None else None
        if variable is None and port is not None:  # `port = int(os.environ["PORT"])` goes with the server
            variable = next(iter(_variables(ctx, port.value)), None)
        setting = f"; `{variable}` no longer does anything" if variable else ""
        if ctx.report("NM257", node, call=short(node), setting=setting):
            ctx.remove(small)
            if port is not None:
                ctx.remove(port)
            at = occ.statement
            if gate is not None and variable is not None and _setting_test(ctx, gate.test):
                ctx.remove(gate)  # `if "PORT" in os.environ:` that held only the server: the marker stands for it
                at = gate
            if variable:
                what = f"`{variable}` does nothing now"
                what = what if len(what) <= marker_room("NM257") else f"{variable} does nothing now"
            elif not self.windowed:
                what = "profiler server gone: use torch.profiler"
            else:
                return  # the capture it served became a torch.profiler profile (NM249): nothing is lost
            ctx.mark(at, marker_text("NM257", what, catalogue_rule("NM257").link))

    def _gate(self, occ, port: cst.Assign | None) -> cst.If | None:
        """The `if` around the server that holds nothing but the server, its port and the import only the server
        reads (`if "PORT" in os.environ:`, a block or one line), without an `else`; None otherwise."""
        parents = self.ctx.analysis.parents
        statement = occ.statement
        if type(statement) is cst.If and type(statement.body) is cst.SimpleStatementSuite:
            gate, parts = statement, [cst.SimpleStatementLine(body=statement.body.body)]  # one line: its smalls
        else:
            block = occ.block
            gate = parents.get(block) if type(block) is cst.IndentedBlock else None
            if type(gate) is not cst.If or gate.body is not block:
                return None
            parts = list(block.body)
        if gate.orelse is not None or not all(self._goes(s, occ, port) for s in parts):
            return None
        return gate

    def _goes(self, statement: cst.CSTNode, occ, port: cst.Assign | None) -> bool:
        """`statement` goes with the server: the server's own small statement, its port's, or an import of
        torch_xla whose names only the server reads."""
        if type(statement) is not cst.SimpleStatementLine:
            return False
        for small in statement.body:
            if small is occ.small or small is port:
                continue
            if not isinstance(small, (cst.Import, cst.ImportFrom)) or not _imports_torch_xla(small) \
                    or isinstance(small.names, cst.ImportStar):
                return False
            for alias in small.names:
                bound = alias.asname.name if alias.asname is not None else alias.name
                name = (dotted_str(bound) or "").split(".")[0]
                if reads_of(self.ctx, name, occ.scope) != 1:
                    return False
        return True

    def _port_assignment(self, node: cst.Call, scope) -> cst.Assign | None | bool:
        """The function's `port = int(os.environ[...])` that only the server read (it goes with the server, else
        a linter flags it unused: F841); None when there is none to take; False when the value may do something
        more than read a setting, so the statement stays with NM199."""
        port = arg(node, 0, "port")
        if port is None or type(port.value) is not cst.Name:
            return None
        return self._only_reader(port.value.value, scope, 1)

    def _only_reader(self, name: str, scope, reads: int) -> cst.Assign | None | bool:
        """The assignment of a function's local `name` that `reads` reads being removed leave unread (the reads
        of captures already removed do not count); None when there is none; False when its value may do more than
        read a setting."""
        bindings = scope.bindings.get(name, ())
        if scope.kind != "function" or reads_of(self.ctx, name, scope) - self.spent.get(name, 0) != reads \
                or len(bindings) != 1 or bindings[0].kind != "assign" or name in scope.globals \
                or name in scope.nonlocals:
            return None
        target = bindings[0].node
        stack: list[cst.CSTNode] = [scope.node]
        while stack:
            statement = stack.pop()
            if type(statement) is cst.Assign:
                if len(statement.targets) == 1 and statement.targets[0].target is target:
                    return statement if reads_setting(statement.value) else False
            elif not isinstance(statement, cst.BaseExpression):
                stack.extend(statement.children)
        return None

    def _read_elsewhere(self, name: str, scope) -> bool:
        """`name` is read anywhere it resolves to the binding in `scope` (the assignment itself aside)."""
        analysis = self.ctx.analysis
        owner = analysis.lookup(name, scope)
        for occ in analysis.occurrences:
            node = occ.node
            if type(node) is cst.Name and node.value == name and analysis.lookup(name, occ.scope) is owner:
                parent = occ.parent
                if type(parent) is cst.AssignTarget and parent.target is node:
                    continue
                return True
        return False


def _imports_torch_xla(small: cst.Import | cst.ImportFrom) -> bool:
    if type(small) is cst.ImportFrom:
        return not small.relative and small.module is not None \
            and (dotted_str(small.module) or "").split(".")[0] == "torch_xla"
    return all((dotted_str(a.name) or "").split(".")[0] == "torch_xla" for a in small.names)


def _setting_test(ctx, test: cst.BaseExpression) -> bool:
    """`test` only reads settings: environment variables, names and literals, compared and combined."""
    if type(test) is cst.Comparison:
        return _setting_test(ctx, test.left) and all(_setting_test(ctx, c.comparator) for c in test.comparisons)
    if type(test) is cst.BooleanOperation:
        return _setting_test(ctx, test.left) and _setting_test(ctx, test.right)
    if type(test) is cst.UnaryOperation:
        return _setting_test(ctx, test.expression)
    if type(test) is cst.Call:
        return ctx.qualname(test.func) in ("os.environ.get", "os.getenv", "int", "str", "float") and all(
            a.keyword is None and not a.star and _setting_test(ctx, a.value) for a in test.args)
    return reads_setting(test)


def _variables(ctx, value: cst.BaseExpression) -> list[str]:
    """The environment variables `value` reads by name: `os.environ["X"]`, `os.environ.get("X")`,
    `os.getenv("X")`, `"X" in os.environ`."""
    found: list[str] = []
    stack: list[cst.CSTNode] = [value]
    while stack:
        node = stack.pop()
        key = None
        if type(node) is cst.Subscript and ctx.qualname(node.value) == "os.environ" and len(node.slice) == 1 \
                and type(node.slice[0].slice) is cst.Index:
            key = string_value(node.slice[0].slice.value)
        elif type(node) is cst.Call and node.args and ctx.qualname(node.func) in ("os.environ.get", "os.getenv"):
            key = string_value(node.args[0].value)
        elif type(node) is cst.Comparison and len(node.comparisons) == 1 \
                and type(node.comparisons[0].operator) in (cst.In, cst.NotIn) \
                and ctx.qualname(node.comparisons[0].comparator) == "os.environ":
            key = string_value(node.left)
        if key:
            found.append(key)
        stack.extend(reversed(node.children))
    return found


_DROPPED = frozenset({"duration_ms", "num_tracing_attempts", "host_tracer_level", "device_tracer_level", "delay_ms"})


def _names(value: cst.BaseExpression) -> list[str]:
    """The names an expression reads (`f"localhost:{port}"` reads `port`)."""
    if type(value) is cst.Name:
        return [value.value]
    out: list[str] = []
    for child in value.children:
        if isinstance(child, cst.CSTNode):
            out += _names(child)
    return out

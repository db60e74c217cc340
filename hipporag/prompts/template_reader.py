"""The official template modules read as data: their Python source parsed, never run.

Why: `import-official` reads a checkout the user has, and running its modules would run whatever they hold.
The official templates are data written as Python: string literals, their concatenations, f-strings, lists
and dicts of them, names bound earlier, `from .x import y` between templates, `str.format` on a text, and one
helper (`utils/llm_utils.py` `convert_format_to_template`). This evaluates exactly that subset from the syntax
tree, so the text it gives is the text the official PromptTemplateManager would load; anything else (another
call, an import of anything but a sibling template or the helper, a loop, a def) is refused in one line
naming the file and line.

The helper is not run either: it is applied as this module's own implementation of its c617143 behaviour
(`{name}` becomes `${name}`, renamed by `placeholder_mapping`, or replaced by `static_values`).
`helper_differs` says whether a checkout's helper source is no longer the one that behaviour was taken from.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import re
import string
from pathlib import Path

from hipporag.core.errors import UserError
from hipporag.core.safe_yaml import YAMLTooLarge, read_capped
from hipporag.prompts.loading import MAX_PROMPT_FILE_BYTES  # no text may outgrow a prompt file

MAX_ITEMS = 10_000  # nor a list grow without bound (`a = a + a`, repeated)
HELPER_MODULE = "utils.llm_utils"
HELPER = "convert_format_to_template"
# sha256 of the helper's source (`def` to its last line) at c617143, the behaviour `_convert` reproduces
HELPER_SHA256 = "8e13c9e7e3f350d4253216c4ce86db3efe645d5feabe0608db221bd6f2646de1"
ALLOWED = (
    "string literals, + and f-strings of them, lists, tuples and dicts, names bound before, str.format, "
    f"`from .<template> import <name>` and {HELPER}"
)


def _code(node) -> str:
    """A node's source on one line, cut short: what a refusal quotes."""
    text = " ".join(ast.unparse(node).split())
    return text if len(text) <= 60 else text[:57] + "..."


class TemplateReadError(UserError, ValueError):
    """A template module outside the subset that is read without running it."""

    hint = f"the importer reads templates as data ({ALLOWED}); compare the checkout with the official repository"


def _convert(original_string: str, placeholder_mapping: dict | None = None, static_values: dict | None = None) -> str:
    """c617143's convert_format_to_template: each `{word}` as `${word}` (renamed by placeholder_mapping), or
    as its static value."""
    mapping, static = placeholder_mapping or {}, static_values or {}

    def one(match: re.Match) -> str:
        name = match.group(1)
        return str(static[name]) if name in static else f"${{{mapping.get(name, name)}}}"

    return re.sub(r"\{(\w+)\}", one, original_string)


HELPERS = {HELPER: _convert}
SCALARS = (str, int, float, bool, type(None))


def helper_source(root: Path) -> str | None:
    """The checkout's helper `def`, as source (parsed, not run); None when it has none."""
    path = root.joinpath(*HELPER_MODULE.split(".")).with_suffix(".py")
    try:
        text = read_capped(path, MAX_PROMPT_FILE_BYTES).decode("utf-8")
        tree = ast.parse(text)
    except (OSError, YAMLTooLarge, UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
        return None  # as good as absent: the import that needs it is refused
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == HELPER:
            return ast.get_source_segment(text, node)
    return None


def helper_differs(root: Path) -> bool:
    """Whether the checkout's helper is not c617143's (the importer then applies a behaviour it may not have)."""
    source = helper_source(root)
    return source is None or hashlib.sha256(source.encode()).hexdigest() != HELPER_SHA256


class TemplateReader:
    """The template modules of one checkout's `prompts/templates/`, each evaluated once, on demand."""

    def __init__(self, root: Path, max_bytes: int = MAX_PROMPT_FILE_BYTES):
        self.root, self.folder, self.max_bytes = root, root / "prompts" / "templates", max_bytes
        self.done: dict[str, dict] = {}
        self.reading: list[str] = []

    def names(self, stem: str) -> dict:
        """The names a template module binds (its imports read first; `_Module` refuses a cycle)."""
        if stem not in self.done:
            self.reading.append(stem)
            try:
                self.done[stem] = _Module(self, self.folder / f"{stem}.py").run()
            finally:
                self.reading.pop()
        return self.done[stem]


class _Module:
    """One module's statements, evaluated in order into its names."""

    def __init__(self, reader: TemplateReader, path: Path):
        self.reader, self.path, self.bound = reader, path, {}

    def fail(self, node, what: str) -> TemplateReadError:
        return TemplateReadError(f"{self.path}:{getattr(node, 'lineno', 0)}: {what}")

    def run(self) -> dict:
        try:
            text = read_capped(self.path, self.reader.max_bytes).decode("utf-8")
            tree = ast.parse(text, filename=str(self.path))
        except YAMLTooLarge as e:
            raise TemplateReadError(f"{self.path}: {e}") from None
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise TemplateReadError(f"{self.path}: cannot be read: {e}") from None
        except SyntaxError as e:
            raise TemplateReadError(f"{self.path}:{e.lineno}: not Python: {e.msg}") from None
        except RecursionError:
            raise TemplateReadError(f"{self.path}: nested too deeply to be read") from None
        for node in tree.body:
            try:
                self.statement(node)
            except RecursionError:
                raise self.fail(node, "nested too deeply to be read") from None
        return self.bound

    def statement(self, node) -> None:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return  # a docstring or a bare literal
        if isinstance(node, ast.Pass):
            return
        if isinstance(node, ast.Assign):
            value = self.value(node.value)
            for target in node.targets:
                self.bind(target, value)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.bind(node.target, self.value(node.value))
        elif isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add) and isinstance(node.target, ast.Name):
            self.bind(node.target, self.add(node, self.value(node.target), node.value))
        elif isinstance(node, ast.ImportFrom):
            self.import_from(node)
        else:
            raise self.fail(node, f"`{_code(node)}` is not run (a template is read as assignments of data)")

    def bind(self, target, value) -> None:
        if not isinstance(target, ast.Name):
            raise self.fail(target, "an assignment to something other than a name")
        self.bound[target.id] = value

    def import_from(self, node: ast.ImportFrom) -> None:
        names = [(a.name, a.asname or a.name) for a in node.names]
        if node.module == "__future__":
            return
        if node.level == 1 and node.module and "." not in node.module and "*" not in dict(names):
            if not (self.reader.folder / f"{node.module}.py").is_file():
                raise self.fail(node, f"it imports prompts.templates.{node.module}, which the checkout lacks")
            if node.module in self.reader.reading:
                raise self.fail(
                    node, f"it imports prompts.templates.{node.module}, which is still being read (a cycle)"
                )
            module = self.reader.names(node.module)
            for name, alias in names:
                if name not in module:
                    raise self.fail(node, f"it imports {name} from prompts.templates.{node.module}, which lacks it")
                self.bound[alias] = module[name]
            return
        if node.level == 3 and node.module == HELPER_MODULE and all(n in HELPERS for n, _ in names):
            if helper_source(self.reader.root) is None:
                raise self.fail(node, f"it imports {HELPER_MODULE}.{HELPER}, which the checkout lacks")
            self.bound.update({alias: HELPERS[name] for name, alias in names})
            return
        if node.level == 0 and node.module == "string" and dict(names) == {"Template": "Template"}:
            self.bound["Template"] = string.Template
            return
        raise self.fail(node, f"`{_code(node)}` is not run (only imports between templates and of {HELPER} are read)")

    def value(self, node):
        """An expression of the subset, evaluated; anything else refused."""
        if isinstance(node, ast.Constant) and isinstance(node.value, SCALARS):
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in self.bound:
                raise self.fail(node, f"the name {node.id!r} is not bound before it in the module")
            return self.bound[node.id]
        if isinstance(node, ast.JoinedStr):
            parts, size = [], 0
            for v in node.values:  # the size counted as it grows: `f"{a}{a}{a}..."` stops at the limit
                parts.append(self.fstring_part(v))
                size += len(parts[-1])
                self.fits(node, size)
            return "".join(parts)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return self.add(node, self.value(node.left), node.right)
        if isinstance(node, ast.List | ast.Tuple) and not any(isinstance(e, ast.Starred) for e in node.elts):
            items = [self.value(e) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Dict) and None not in node.keys:
            return {self.key(k): self.value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.fail(node, f"`{_code(node)}` is not evaluated (a template is read as data)")

    def key(self, node):
        key = self.value(node)
        if not isinstance(key, SCALARS):
            raise self.fail(node, "a dict key that is not a string or a number")
        return key

    def fits(self, node, size: int, limit: int | None = None) -> None:
        """Refuse a text (or a list) that would outgrow what a prompt file holds, before it is built."""
        if size > (limit or self.reader.max_bytes):
            raise self.fail(node, f"a value of {size:,} characters or items, more than a prompt may hold")

    def add(self, node, left, right_node):
        right = self.value(right_node)
        if not (type(left) is type(right) and isinstance(left, str | list | tuple)):
            raise self.fail(node, f"`{_code(node)}` adds a {type(left).__name__} and a {type(right).__name__}")
        self.fits(node, len(left) + len(right), None if isinstance(left, str) else MAX_ITEMS)
        return left + right

    def fstring_part(self, node) -> str:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.FormattedValue) and node.format_spec is None and node.conversion == -1:
            value = self.value(node.value)
            if isinstance(value, str | int | float):
                return str(value)
        raise self.fail(
            node,
            f"`{_code(node)}`: an f-string field is read only as a text or number, without conversion or format spec",
        )

    def call(self, node: ast.Call):
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise self.fail(node, f"`{_code(node)}`: a call with * or ** arguments is not run")
        args = [self.value(a) for a in node.args]
        kwargs = {k.arg: self.value(k.value) for k in node.keywords}
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "format":
            return self.format(node, self.value(func.value), args, kwargs)
        if isinstance(func, ast.Name) and func.id in self.bound and self.bound[func.id] in HELPERS.values():
            return self.helper(node, self.bound[func.id], args, kwargs)
        if isinstance(func, ast.Name) and self.bound.get(func.id) is string.Template:
            if len(args) != 1 or kwargs or not isinstance(args[0], str):
                raise self.fail(node, "Template(...) takes one text")
            return string.Template(args[0])
        raise self.fail(node, f"`{_code(node)}` is not run (the calls read are str.format and {HELPER})")

    def helper(self, node, helper, args: list, kwargs: dict) -> str:
        """convert_format_to_template(original_string, placeholder_mapping, static_values), our copy applied
        to a text and mappings of texts only."""
        try:
            bound = inspect.signature(helper).bind(*args, **kwargs).arguments
        except TypeError as e:
            raise self.fail(node, f"`{_code(node)}`: {e}") from None
        text, mappings = bound.get("original_string"), [v for k, v in bound.items() if k != "original_string"]
        plain = all(
            m is None or (isinstance(m, dict) and all(isinstance(v, str | int | float) for v in m.values()))
            for m in mappings
        )
        if not isinstance(text, str) or not plain:
            raise self.fail(node, f"`{_code(node)}`: {HELPER} is read with a text and mappings of texts only")
        # at most how long the text grows: each `{name}` replaced by the longest value given, or `${name}`
        longest = max((len(str(v)) + 3 for m in mappings if m for v in m.values()), default=0)
        self.fits(node, len(text) + len(re.findall(r"\{\w+\}", text)) * longest)
        return helper(**bound)

    def format(self, node, text, args: list, kwargs: dict) -> str:
        """`text.format(...)` with plain fields only (no attribute or index access, no conversion or spec)."""
        if not isinstance(text, str) or not all(isinstance(v, str | int | float) for v in [*args, *kwargs.values()]):
            raise self.fail(node, ".format on something other than a text, or with values other than texts")
        try:
            fields = [(f, c, s) for _, f, s, c in string.Formatter().parse(text) if f is not None]
        except ValueError as e:
            raise self.fail(node, f".format of a text that is not a format string: {e}") from None
        if any(c or s or not (f == "" or f.isidentifier() or f.isdigit()) for f, c, s in fields):
            raise self.fail(node, ".format of a text with a field other than {name}, {0} or {}")
        self.fits(node, len(text) + len(fields) * max((len(str(v)) for v in [*args, *kwargs.values()]), default=0))
        try:
            return text.format(*args, **kwargs)
        except (IndexError, KeyError) as e:
            raise self.fail(node, f".format lacks the value of the field {e}") from None

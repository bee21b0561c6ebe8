"""The compiled rules kept across processes: a hit skips reading, checking and compiling.

Loading the rules parses every YAML file, validates it against the rule schema and
generates and compiles a Python function per template; every worker and every CLI
run paid that. Here the compiled :class:`engine.ruleset.Rules` is pickled to one file
per key, the key a digest of everything the result depends on: each rule file's path
and bytes in every layer (the built-in rules, a ``rules_dir``), a protocol folder's
hooks modules, the engine's own source and schemas, the hook table's names, the
Python that wrote the code objects and the working directory (errors name rule files
relative to it). An unchanged set of files finds its entry; any
change finds none and compiles as before, and a compile without problems rewrites
the entry (a temporary file, then ``os.replace``, so a reader sees a whole entry or
none).

What pickle cannot carry is handled by reference: a generated function becomes its
code object (marshal) and its globals; any object that is a module-level name of an
engine, proxai or jmespath module (sentinels such as ``MISS``, hook functions, shared
option tables) is looked up again by that name, so identity checks still hold; a
protocol folder's hooks module is executed again from its file and its objects (hook
functions, classes) looked up in it. An entry that does
not load (partial, corrupt, from another engine) is a miss.

``PROXAI_RULES_CACHE`` names the directory; ``off`` turns the cache off. The default
is ``$XDG_CACHE_HOME/proxai/rules`` (``~/.cache/proxai/rules``); a directory that
cannot be created or written turns it off for the process, and so does one that
another user owns or may write to (an entry is code the loader runs).
"""
from __future__ import annotations

import builtins
import hashlib
import importlib
import importlib.util
import io
import linecache
import marshal
import os
import pickle
import sys
import tempfile
import types
from pathlib import Path

#: entries kept; older ones (by last use) are removed when an entry is written
MAX_ENTRIES = 16
_PROTOCOL = pickle.HIGHEST_PROTOCOL
_HOOK_MODULE_PREFIX = "proxai_protocol_hooks."
#: packages whose module-level objects are stored by name, the engine's own first: an object
#: imported into several modules is named where it lives
_REFERENCED_PACKAGES = ("engine", "jmespath", "proxai")
_ATOMIC = (str, bytes, int, float, complex, bool, type(None), tuple, frozenset, range)
_ENGINE = Path(__file__).resolve().parent

_engine_digest: bytes | None = None


def directory() -> Path | None:
    """The cache directory, or None when the cache is off."""
    env = os.environ.get("PROXAI_RULES_CACHE")
    if env is not None and env.strip().lower() in ("off", "0", "false", "no", ""):
        return None
    try:
        if env:
            return Path(env).expanduser()
        base = os.environ.get("XDG_CACHE_HOME")
        return (Path(base).expanduser() if base else Path.home() / ".cache") / "proxai" / "rules"
    except (RuntimeError, KeyError):  # no home directory to be found
        return None


def _engine_code(schemas: Path) -> bytes:
    """The engine's own source and schemas, and the Python whose code objects are stored."""
    global _engine_digest
    if _engine_digest is None:
        digest = hashlib.blake2b(digest_size=20)
        digest.update(f"{sys.version}|{sys.implementation.cache_tag}|{marshal.version}|{_PROTOCOL}".encode())
        try:
            import jmespath
            from importlib.metadata import version

            digest.update(f"|jmespath {jmespath.__version__}|proxai {version('proxai')}".encode())
        except (ImportError, AttributeError, ValueError, LookupError):
            pass
        for path in [*sorted(_ENGINE.rglob("*.py")), *sorted(Path(schemas).glob("*.json"))]:
            digest.update(str(path.relative_to(path.parent.parent)).encode() + b"\0" + path.read_bytes() + b"\0")
        _engine_digest = digest.digest()
    return _engine_digest


def key(dirs: list[Path], hooks: dict, rule_files, schemas: Path) -> str | None:
    """The entry's name for these rule layers (`rule_files(layer)`: a layer's rule files)
    and hook table; None when a layer cannot be read (the compile then reports it)."""
    if directory() is None:
        return None
    try:
        return _key(dirs, hooks, rule_files, schemas)
    except OSError:
        return None


def _key(dirs: list[Path], hooks: dict, rule_files, schemas: Path) -> str | None:
    digest = hashlib.blake2b(_engine_code(schemas), digest_size=20)
    # rule files are named relative to the working directory in errors and code objects
    digest.update(os.getcwd().encode() + b"\0")
    for name, fn in sorted(hooks.items()):
        digest.update(f"{name}={getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', type(fn).__name__)};".encode())
    for layer in dirs:
        layer = Path(layer)
        if not layer.is_dir():
            return None
        digest.update(b"layer\0" + str(layer.resolve()).encode() + b"\0")
        # a protocol folder's hooks module is part of its rules
        for path in [*rule_files(layer), *sorted(layer.glob("*/*.py"))]:
            try:
                data = path.read_bytes()
            except OSError:
                return None
            digest.update(str(path).encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


# --- writing -----------------------------------------------------------------------


def _references(hook_namespaces=()) -> dict:
    """id -> (module, name) of every module-level object of the referenced packages, and
    of each module and module namespace (and the builtins) by name; a protocol folder's
    hooks module (``hook_namespaces``, not importable by name) by its file."""
    refs: dict = {id(builtins.__dict__): ("builtins_dict",)}
    rank = {package: i for i, package in enumerate(_REFERENCED_PACKAGES)}
    modules = sorted(((n, m) for n, m in list(sys.modules.items()) if m is not None and n.split(".")[0] in rank),
                     key=lambda item: (rank[item[0].split(".")[0]], item[0]))
    for namespace in hook_namespaces:
        modname, file = namespace["__name__"], namespace["__file__"]
        refs.setdefault(id(namespace), ("hook_module_dict", modname, file))
        for attr, value in list(namespace.items()):
            if not isinstance(value, _ATOMIC) and not isinstance(value, types.ModuleType):
                refs.setdefault(id(value), ("hook_attr", modname, file, attr))
    for modname, module in modules:
        namespace = getattr(module, "__dict__", None)
        if namespace is None:
            continue
        refs.setdefault(id(namespace), ("module_dict", modname))
        for attr, value in list(namespace.items()):
            # classes and importable functions pickle by their own qualified name
            if isinstance(value, (*_ATOMIC, types.ModuleType, type)) or (
                    type(value) is types.FunctionType and _importable(value)):
                continue
            refs.setdefault(id(value), ("attr", modname, attr))
    return refs


class _Pickler(pickle.Pickler):
    def __init__(self, file, hook_namespaces=()):
        super().__init__(file, _PROTOCOL)
        self.refs = _references(hook_namespaces)

    def persistent_id(self, obj):
        ref = self.refs.get(id(obj))
        if ref is not None:
            return ref
        if isinstance(obj, types.ModuleType):
            return ("module", obj.__name__)
        return None

    def reducer_override(self, obj):
        if type(obj) is types.CodeType:
            return marshal.loads, (marshal.dumps(obj),)
        if type(obj) is types.FunctionType and not _importable(obj):
            # generated functions and closures: code, globals, then the state (cells may
            # refer back to the function, so they are filled after it exists)
            cells = len(obj.__closure__ or ())
            state = (obj.__defaults__, obj.__kwdefaults__, [c.cell_contents for c in obj.__closure__ or ()],
                     obj.__dict__ or None, obj.__qualname__, obj.__module__)
            return _function, (obj.__code__, obj.__globals__, obj.__name__, cells), state, None, None, _set_function
        return NotImplemented


def _importable(fn) -> bool:
    module = sys.modules.get(fn.__module__ or "")
    if module is None:
        return False
    target = module
    for part in fn.__qualname__.split("."):
        target = getattr(target, part, None)
    return target is fn


def _function(code, globals_, name, cells):
    return types.FunctionType(code, globals_, name, None, tuple(types.CellType() for _ in range(cells)))


def _set_function(fn, state):
    defaults, kwdefaults, cells, attrs, qualname, module = state
    fn.__defaults__, fn.__kwdefaults__, fn.__qualname__, fn.__module__ = defaults, kwdefaults, qualname, module
    for cell, value in zip(fn.__closure__ or (), cells):
        cell.cell_contents = value
    if attrs:
        fn.__dict__.update(attrs)


def store(name: str, rules, lines: dict, hooks=()) -> bool:
    """Write the entry ``name`` for ``rules`` (and the generated source ``lines`` kept for
    tracebacks); ``hooks`` are the protocol folders' own hook functions, whose modules'
    objects are stored by name. False when it cannot be written (the cache is then just
    not used)."""
    root = directory()
    if root is None:
        return False
    namespaces = {id(g): g for g in (getattr(fn, "__globals__", None) for fn in hooks)
                  if g is not None and str(g.get("__name__", "")).startswith(_HOOK_MODULE_PREFIX) and g.get("__file__")}
    buffer = io.BytesIO()
    try:
        _Pickler(buffer, namespaces.values()).dump((name, rules, lines))
    except Exception:  # noqa: BLE001 - something pickle cannot carry: the rules load as they did, uncached
        return False
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _private(root):
            return False
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".pickle")
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(buffer.getvalue())
            os.replace(tmp, root / f"{name}.pickle")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    _prune(root)
    return True


def _private(root: Path) -> bool:
    """Loading an entry runs code from it: only a directory of this user's that nobody else
    may write to is used."""
    try:
        st = root.stat()
    except OSError:
        return False
    return (not hasattr(os, "getuid") or st.st_uid == os.getuid()) and not st.st_mode & 0o022


def _prune(root: Path) -> None:
    try:
        entries = sorted(root.glob("*.pickle"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in entries[MAX_ENTRIES:]:
            old.unlink(missing_ok=True)
    except OSError:
        pass


# --- reading -----------------------------------------------------------------------


class _Unpickler(pickle.Unpickler):
    def __init__(self, file):
        super().__init__(file)
        self.hook_modules: dict = {}

    def hook_module(self, modname: str, file: str):
        """A protocol folder's hooks module, executed once per entry as engine.wire loads it."""
        module = self.hook_modules.get(modname)
        if module is None:
            spec = importlib.util.spec_from_file_location(modname, file)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            self.hook_modules[modname] = module
        return module

    def persistent_load(self, pid):
        kind = pid[0]
        if kind == "builtins_dict":
            return builtins.__dict__
        if kind == "module":
            return importlib.import_module(pid[1])
        if kind == "module_dict":
            return vars(importlib.import_module(pid[1]))
        if kind == "attr":
            return getattr(importlib.import_module(pid[1]), pid[2])
        if kind == "hook_module_dict":
            return vars(self.hook_module(pid[1], pid[2]))
        if kind == "hook_attr":
            return getattr(self.hook_module(pid[1], pid[2]), pid[3])
        raise pickle.UnpicklingError(f"unknown reference {kind!r}")


def load(name: str):
    """The rules of entry ``name``, or None (no entry, or one that does not load)."""
    root = directory()
    if root is None:
        return None
    path = root / f"{name}.pickle"
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not _private(root):
        return None
    try:
        stored_name, rules, lines = _Unpickler(io.BytesIO(data)).load()
    except Exception:  # noqa: BLE001 - any broken entry is a miss; the compile rewrites it
        return None
    if stored_name != name:
        return None
    linecache.cache.update(lines)
    try:
        os.utime(path)  # last use, for pruning
    except OSError:
        pass
    return rules

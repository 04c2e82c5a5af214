#!/usr/bin/python3
# Checks the size limits of docs/architecture.md ("Sizes") on the library and the plugins (api, base,
# config, loader, core, plugins): no source file over 900 lines, no function over 120 lines (a
# function's lines run from its first line to its closing brace; lambdas count in the function that
# holds them). Functions are found by clang's parser (Debian python3-clang-14), from the compile
# commands of a build directory, so a macro or a template cannot hide one.
#
#   scripts/check-sizes.py BUILD_DIR    BUILD_DIR configured with CMAKE_EXPORT_COMPILE_COMMANDS
#                                       (scripts/check-thread-safety.sh leaves build/thread-safety so)
#
# Prints every file and function over its limit and exits 1; generated code (the etcd protocol's
# .pb files, the embedded Lua) and the vendored .proto files are not ours to size.
import json
import os
import shlex
import sys
from concurrent.futures import ProcessPoolExecutor

import clang.cindex as ci

FILE_LIMIT = 900
FUNCTION_LIMIT = 120
ROOTS = ("api/", "base/", "config/", "loader/", "core/", "plugins/")
SOURCE_SUFFIXES = (".c", ".cpp", ".h", ".hpp")
FUNCTION_KINDS = {
    ci.CursorKind.FUNCTION_DECL, ci.CursorKind.CXX_METHOD, ci.CursorKind.CONSTRUCTOR,
    ci.CursorKind.DESTRUCTOR, ci.CursorKind.FUNCTION_TEMPLATE, ci.CursorKind.CONVERSION_FUNCTION,
}

ci.Config.set_library_file("/usr/lib/llvm-14/lib/libclang-14.so.1")
root = os.path.realpath(os.path.join(os.path.dirname(__file__), ".."))


def ours(path):
    rel = os.path.relpath(os.path.realpath(path), root)
    if rel.startswith("..") or not rel.startswith(ROOTS) or "/proto/" in rel:
        return None
    return rel


def long_functions(entry):
    """(file, line, name, lines) of every function definition over the limit in one translation unit."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    # Keep the flags that shape parsing (defines, include paths, the standard); drop the compiler,
    # the output and the source itself.
    kept, skip = [], False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-c", "-MF", "-MT", "-MQ"):
            skip = a != "-c"
            continue
        if os.path.realpath(os.path.join(entry["directory"], a)) == os.path.realpath(os.path.join(entry["directory"], entry["file"])):
            continue
        kept.append(a)
    os.chdir(entry["directory"])
    tu = ci.Index.create().parse(entry["file"], args=kept + ["-Wno-everything"])
    found = []
    for cursor in tu.cursor.walk_preorder():
        if cursor.kind not in FUNCTION_KINDS or not cursor.is_definition():
            continue
        start, end = cursor.extent.start, cursor.extent.end
        if not start.file:
            continue
        rel = ours(start.file.name)
        if rel is None:
            continue
        lines = end.line - start.line + 1
        if lines > FUNCTION_LIMIT:
            found.append((rel, start.line, cursor.spelling, lines))
    return found


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/check-sizes.py BUILD_DIR")
    with open(os.path.join(sys.argv[1], "compile_commands.json")) as f:
        entries = [e for e in json.load(f) if ours(os.path.join(e["directory"], e["file"])) and ".pb." not in e["file"]]
    problems = set()
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        for found in pool.map(long_functions, entries):
            for rel, line, name, lines in found:
                problems.add(f"{rel}:{line}: function `{name}` is {lines} lines (limit {FUNCTION_LIMIT})")
    for top in ROOTS:
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in names:
                path = os.path.join(dirpath, name)
                if not name.endswith(SOURCE_SUFFIXES) or ours(path) is None:
                    continue
                with open(path, errors="replace") as f:
                    count = sum(1 for _ in f)
                if count > FILE_LIMIT:
                    problems.add(f"{ours(path)}: {count} lines (limit {FILE_LIMIT})")
    for p in sorted(problems):
        print(p)
    print(f"check-sizes: {len(entries)} translation units parsed; {len(problems)} over a limit")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()

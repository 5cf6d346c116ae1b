"""No two shared libraries that our binaries load into the global symbol scope export the same symbol.

libc10 (torch wheel) and Debian's libsentencepiece both export gflags-style globals such as FLAGS_minloglevel
(4 bytes in one, a 32-byte flag object in the other); with both in one process the dynamic linker binds both
libraries' references to one copy and memory is corrupted at start-up (in drope-eval every TORCH_CHECK then
aborts). libsentencepiece is now reached only through libdrope_sentencepiece.so, dlopen()ed with RTLD_LOCAL |
RTLD_DEEPBIND. Allowed: the C/C++ runtime (libc, libstdc++, ...), definitions that are weak in every library
(template/inline instantiations merged by design) and std:: / __gnu_cxx:: instantiations. FLAGS_* must be unique
whatever else is allowed. Also: the tools start and turn an allocation failure into a clean error."""
import os
import re
import resource
import subprocess

import pytest

from conftest import BIN, expect_error, run_cli

TOOLS = ["drope-eval", "drope-analyze", "drope-train", "drope-model", "drope-data", "drope-bench"]
RUNTIME = re.compile(r"^(ld-linux[^/]*|linux-vdso[^/]*|lib(c|m|dl|rt|pthread|util|resolv|stdc\+\+|gcc_s)\.so[.\d]*)$")
WEAK = set("WVu")
STD = ("_ZNSt", "_ZNKSt", "_ZSt", "_ZTISt", "_ZTSSt", "_ZTVSt", "_ZN9__gnu_cxx", "_ZNK9__gnu_cxx", "_ZGVZNSt")


def loaded_libraries(exe):
    """The shared libraries the dynamic linker loads for `exe` (ldd: name => path)."""
    out = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, check=True).stdout
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
        if m and m.group(2) != "not":
            libs[m.group(1)] = m.group(2)
        elif "not found" in line:
            raise AssertionError(f"{exe}: {line.strip()}")
    return libs


_exports = {}


def exported(path):
    """{symbol: (type, size)} of the defined dynamic symbols of a library (versions stripped)."""
    if path not in _exports:
        out = subprocess.run(["nm", "-D", "--defined-only", "-S", path], capture_output=True, text=True,
                             check=True).stdout
        syms = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 4:
                _, size, kind, name = parts
            elif len(parts) == 3:
                _, kind, name = parts
                size = ""
            else:
                continue
            if kind == "A":  # version nodes, __bss_start and the like
                continue
            syms[name.split("@")[0]] = (kind, size)
        _exports[path] = syms
    return _exports[path]


def package(path):
    """Libraries shipped together (the torch wheel with its nvidia wheels) count as one: their internal
    duplicates (tensorpipe in both libtorch_cpu and libtorch_cuda) are the wheel's own, built and tested together."""
    m = re.search(r"/site-packages/(torch|nvidia)/", path)
    return "torch wheel" if m else path


LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start", "_DYNAMIC", "_GLOBAL_OFFSET_TABLE_"}


def clashes(exe):
    """(symbol, lib A, lib B, A's (type, size), B's) for every symbol that two non-runtime libraries of
    different packages define."""
    owner = {}
    found = []
    for name, path in sorted(loaded_libraries(exe).items()):
        if RUNTIME.match(name):
            continue
        for sym, info in exported(path).items():
            if sym not in owner:
                owner[sym] = (name, path, info)
                continue
            if sym in LINKER_SYMBOLS:  # defined by the linker in every shared object
                continue
            other, opath, oinfo = owner[sym]
            if package(opath) == package(path) and not sym.startswith("FLAGS_"):
                continue
            # A weak *function* ('W') is made to be overridden (libbsd's MD5* forward to libmd's); weak or
            # strong data of two sizes is the FLAGS_ kind of clash.
            benign = ((info[0] in WEAK and oinfo[0] in WEAK and info[1] == oinfo[1]) or sym.startswith(STD)
                      or "W" in (info[0], oinfo[0]))
            if sym.startswith("FLAGS_") or not benign:
                found.append((sym, other, name, oinfo, info))
    return found


@pytest.mark.parametrize("tool", TOOLS)
def test_no_symbol_is_exported_by_two_loaded_libraries(tool):
    exe = BIN / tool
    if not exe.exists():
        pytest.skip(f"{exe} not built")
    found = clashes(exe)
    assert not found, f"{tool}: symbols defined by two libraries:\n" + "\n".join(
        f"  {s}: {a} {ai} / {b} {bi}" for s, a, b, ai, bi in found[:40])
    assert not any("sentencepiece" in n and "drope" not in n for n in loaded_libraries(exe)), \
        f"{tool} loads libsentencepiece into the global scope"


def test_sentencepiece_module_exports_only_its_interface():
    module = BIN / "libdrope_sentencepiece.so"
    assert module.exists()
    names = [s for s, (k, _) in exported(str(module)).items() if k not in "UwvA"]
    assert names and all(n.startswith("drope_spm_") for n in names), names


@pytest.mark.parametrize("tool", ["drope-eval", "drope-analyze"])
def test_tools_start(tool):
    r = run_cli(tool, "--help")
    assert "Usage" in r.stdout or "usage" in r.stdout.lower(), r.stdout


def huge_model(tmp):
    """A model directory whose drope.yaml asks for a 4M x 64K embedding (1 TiB of float32)."""
    d = tmp / "huge"
    run_cli("drope-model", "init", "--preset", "micro", "--out", d)
    y = (d / "drope.yaml").read_text()
    for key, value in (("vocab_size", 1 << 22), ("hidden_size", 1 << 16), ("intermediate_size", 1 << 16),
                       ("num_heads", 64), ("num_kv_heads", 64)):
        y, n = re.subn(rf"^(\s*{key}:)\s*\d+", rf"\g<1> {value}", y, flags=re.M)
        assert n == 1, (key, y)
    (d / "drope.yaml").write_text(y)
    (d / "config.json").unlink(missing_ok=True)
    return d


def run_with_address_limit(args, gib=64):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (gib << 30, gib << 30))
    return subprocess.run([str(BIN / args[0]), *map(str, args[1:])], capture_output=True, text=True, timeout=240,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), preexec_fn=limit)


def test_allocation_failure_is_a_clean_error(tmp):
    d = huge_model(tmp)
    (tmp / "tokens.json").write_text("[[1, 2, 3]]")
    for args in (["drope-eval", "logits", "--model", d, "--tokens", tmp / "tokens.json", "--out",
                  tmp / "l.safetensors"],
                 ["drope-analyze", "constant-seq", "--model", d]):
        r = run_with_address_limit(args)
        expect_error(r)
        assert r.returncode == 1, f"{args[0]}: exit status {r.returncode}\n{r.stderr}"
        assert r.stderr.startswith("error:"), r.stderr

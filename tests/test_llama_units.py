"""Parts of the llama.cpp support that need no build: text divergence, the build cache's
rules, the random qwen3moe writer, the llama-token adapter's argv."""
from __future__ import annotations

import os
import sys

import pytest

from orchestrator.engines import CellSpec
from orchestrator.plugins import get_adapter
from orchestrator.stats.divergence import divergence
from orchestrator.tools import llamacpp_build as lb

# -- divergence ------------------------------------------------------------------------------

def test_divergence_chars():
    assert divergence("abc def", "abc def") is None
    assert divergence("abc def", "abX def") == 2
    assert divergence("", "") is None
    assert divergence("", "a") == 0
    assert divergence("abc", "abcdef") == 3          # a prefix: where the shorter one ends
    assert divergence("abcdef", "abc") == 3
    assert divergence("日本語", "日本人") == 2         # code points, not bytes


def test_divergence_words():
    assert divergence("the cat sat", "the  cat\nsat", unit="word") is None
    assert divergence("the cat sat", "the dog sat", unit="word") == 1
    assert divergence("the cat", "the cat sat", unit="word") == 2
    with pytest.raises(ValueError):
        divergence("a", "b", unit="token")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        divergence(None, "b")  # type: ignore[arg-type]


# -- build cache -----------------------------------------------------------------------------

def _fake_build(root):
    (root / "bin").mkdir(parents=True)
    (root / "lib").mkdir()
    for b in lb.BINARIES:
        (root / "bin" / b).write_text("")
    (root / "lib" / "libllama.so").write_text("")


def test_cache_dir_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_LLAMA_CACHE", str(tmp_path / "c"))
    assert lb.cache_dir("1.2.3") == tmp_path / "c" / "1.2.3"
    monkeypatch.delenv("ORCH_LLAMA_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert lb.cache_dir("1.2.3") == tmp_path / "x" / "orch" / "llama.cpp" / "1.2.3"


def test_cached_build_reused_only_with_stamp(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_LLAMA_CACHE", str(tmp_path))
    root = tmp_path / "9.9.9"
    _fake_build(root)
    assert lb.find_build("9.9.9") is None          # files but no stamp: an unfinished build
    (root / lb.STAMP).write_text('{"version": "9.9.9"}')
    found = lb.find_build("9.9.9")
    assert found is not None and found.lib_dir == root / "lib"

    def no_run(*a, **k):
        raise AssertionError("a cached build must not run anything")

    monkeypatch.setattr(lb, "_run", no_run)
    lines: list[str] = []
    assert lb.build("9.9.9", log=lines.append).root == root
    assert "cached build" in lines[0]


def test_missing_tools_named_with_debian_packages(tmp_path, monkeypatch):
    monkeypatch.setenv("ORCH_LLAMA_CACHE", str(tmp_path))
    real_which = lb.shutil.which
    monkeypatch.setattr(lb.shutil, "which",
                        lambda name: None if name in ("ninja", "g++", "c++") else real_which(name))
    with pytest.raises(lb.BuildError) as err:
        lb.build("9.9.9", log=lambda s: None)
    msg = str(err.value)
    assert "ninja-build" in msg and "g++" in msg and "apt-get install" in msg
    assert not (tmp_path / "9.9.9" / lb.STAMP).exists()


def test_failed_step_raises_with_output_tail(tmp_path):
    with pytest.raises(lb.BuildError) as err:
        lb._run([sys.executable, "-c", "import sys; print('compiling x'); "
                 "print('error: boom', file=sys.stderr); sys.exit(3)"], log=lambda s: None)
    assert "exit 3" in str(err.value) and "error: boom" in str(err.value)


# -- the random qwen3moe model ---------------------------------------------------------------

@pytest.mark.extra("llama")
def test_make_moe_tiny(tmp_path):
    import gguf

    from orchestrator.tools.moe_model import make_moe

    a = make_moe("tiny", tmp_path / "a.gguf")
    b = make_moe("tiny", tmp_path / "b.gguf")
    assert a.read_bytes() == b.read_bytes()             # same size and seed, same file
    assert 5e6 < a.stat().st_size < 9e6
    assert make_moe("tiny", tmp_path / "c.gguf", seed=1).read_bytes() != a.read_bytes()
    r = gguf.GGUFReader(str(a))
    fields = {k: f for k, f in r.fields.items()}

    def scalar(key):
        f = fields[key]
        return f.parts[f.data[0]].tolist()[0]

    assert bytes(fields["general.architecture"].parts[-1]).decode() == "qwen3moe"
    assert scalar("qwen3moe.expert_count") == 8 and scalar("qwen3moe.expert_used_count") == 2
    assert scalar("qwen3moe.block_count") == 4
    names = {t.name for t in r.tensors}
    assert "blk.3.ffn_gate_exps.weight" in names and "output.weight" in names
    out = next(t for t in r.tensors if t.name == "output.weight")
    rows = out.data.reshape(-1, 128)
    live = [i for i in range(rows.shape[0]) if abs(rows[i]).sum() > 0]
    assert live == list(range(0x20, 0x7F))              # only printable ASCII can be generated
    assert not list(tmp_path.glob(".*.tmp.*"))


# -- the llama-token adapter -----------------------------------------------------------------

def test_llama_token_argv():
    adapter = get_adapter("llama-token")
    assert adapter.builtin_binary().name == "llama_token.py"
    cell = CellSpec(binary="/w/bin/llama_token-abc.py", model_path="~/m.gguf", prompt="p q",
                    tokens=5, flags=["--top-k-experts", "2"], csv_path="/w/t.csv",
                    extra={"workdir": "/w"})
    assert adapter.build_argv(cell) == [
        "python3", "/w/bin/llama_token-abc.py", "-m", "~/m.gguf", "-p", "p q", "-n", "5",
        "--top-k-experts", "2", "--csv", "/w/t.csv"]
    cell.extra["python"] = "orch"
    assert adapter.build_argv(cell)[0] == sys.executable
    cell.model_path = None
    with pytest.raises(ValueError):
        adapter.build_argv(cell)


def test_llama_token_without_bindings_says_so(tmp_path):
    """A device python without llama-cpp-python: exit 4 and a message, no traceback."""
    import subprocess

    from orchestrator.shipped import shipped_file

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-S", str(shipped_file("llama_token.py")),
                           "-m", str(tmp_path / "x.gguf"), "-n", "2"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 4, done.stderr
    assert "llama-cpp-python" in done.stderr and "Traceback" not in done.stderr

"""`@dsl.autotune`: the choice is the fewest simulated cycles (checked against profiling each
candidate by hand), candidates that do not fit are skipped and listed, the choice is cached in
memory and on disk per shape class, and tuning never touches the caller's tensors."""
from __future__ import annotations

import importlib.util
import json
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import dsl
from compiler import CONFIG
from compiler.cli import main
from dsl.autotune import Autotuned, Trial, TunedRun, Tuning, written_params
from dsl.errors import KernelError
from dsl.kernel import Launch

SCALE = """
@dsl.kernel
def scale(x: GM[f32], y: GM[f32], TILE: Const[int] = 64):
    for t in dsl.tiles(x.shape[0], TILE):
        y[t] = x[t] * 2.0
"""
BIG = 1 << 20  # a tile of 4 MiB: never fits UB


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test its own cache (compiled kernels and autotune choices)."""
    d = tmp_path / "cache"
    monkeypatch.setattr(CONFIG, "cache_dir", str(d))
    monkeypatch.setattr(CONFIG, "disk_cache", True)
    monkeypatch.setattr(CONFIG, "autotune_cache", True)
    return d


@pytest.fixture
def profiles(monkeypatch: pytest.MonkeyPatch) -> list[dict]:
    """Every profiled launch of a plain kernel (what tuning does), with its Const values."""
    seen: list[dict] = []
    original = Launch.profile

    def counting(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if type(self) is Launch:
            seen.append({d.name: v for d, v in zip(self.kernel.decls, args) if d.kind == "const"})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Launch, "profile", counting)
    return seen


def load(path: Path, src: str):  # type: ignore[no-untyped-def]
    """Write a module of kernels to `path` and import it (again, if it was before)."""
    path.write_text("import dsl\nfrom dsl import GM, Const, f32, f16\n\n" + textwrap.dedent(src))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def tuned(tmp_path: Path, space: str = "TILE=[32, 64, 256, 1024]", src: str = SCALE) -> Autotuned:
    return load(tmp_path / "k.py", f"\n@dsl.autotune({space})" + src).scale


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def data(n: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    return np.random.default_rng(0).standard_normal(n).astype(np.float32), np.full(n, 7.0, np.float32)


def test_picks_the_fewest_cycles_as_profiled_by_hand(tmp_path: Path) -> None:
    k = tuned(tmp_path)
    x, y = data()
    by_hand = [k.base[4].profile(x, y, TILE=t).cycles for t in (32, 64, 256, 1024)]
    best = k[4].best(x, y)
    assert [t.cycles for t in best.trials] == by_hand
    assert best.config == {"TILE": (32, 64, 256, 1024)[by_hand.index(min(by_hand))]}
    assert best.cycles == min(by_hand) and best.block_dim == 4
    assert len(set(by_hand)) > 1  # the choice means something
    assert best.shape_class == "x:f32[4096] y:f32[4096]"
    k[4](x, y)
    np.testing.assert_array_equal(y, x * 2)


def test_ties_go_to_the_earlier_candidate_whatever_the_thread_count(tmp_path: Path) -> None:
    src = SCALE.replace("TILE: Const[int] = 64", "TILE: Const[int] = 64, UNUSED: Const[int] = 0")
    k = tuned(tmp_path, 'configs=[{"TILE": 32}, {"TILE": 256, "UNUSED": 2}, {"TILE": 256, "UNUSED": 1}, {"TILE": 1024}, '
                        '{"TILE": 256, "UNUSED": 3}]', src)
    x, y = data()
    runs = [k[4].tune((x, y), force=True, threads=n) for n in (1, 2, 5)]
    assert len({tuple(t.cycles for t in r.trials) for r in runs}) == 1
    cycles = [t.cycles for t in runs[0].trials]
    assert cycles[1] == cycles[2] == cycles[4] == min(cycles)  # the same code, three times, and the fastest
    assert all(r.config == {"TILE": 256, "UNUSED": 2} for r in runs)


def test_candidates_that_do_not_fit_are_skipped_and_listed(tmp_path: Path) -> None:
    k = tuned(tmp_path, f"TILE=[{BIG}, 64, 256]")
    x, y = data()
    best = k[4].best(x, y)
    assert best.config["TILE"] in (64, 256)
    failed = best.failed
    assert [t.config for t in failed] == [{"TILE": BIG}]
    assert failed[0].error.startswith("error[E301]: ") and failed[0].error.endswith("free")
    table = k[4].tune_table(x, y)
    lines = table.splitlines()
    assert "scale[4] on ascend910b1 for x:f32[4096] y:f32[4096]: 3 candidates, 1 failed" in lines[0]
    assert lines[2].split()[0] == "1" and lines[2].endswith(f"TILE={best.config['TILE']}")
    assert lines[-1].split()[:2] == ["-", "failed"] and f"TILE={BIG}: error[E301]" in lines[-1]


def test_all_candidates_failing_is_an_error_at_the_def_listing_each(tmp_path: Path) -> None:
    k = tuned(tmp_path, f"TILE=[{BIG}, {BIG * 2}]")
    x, y = data()
    with pytest.raises(KernelError) as ei:
        k[4](x, y)
    e = ei.value
    text = e.render()
    path = str(tmp_path / "k.py")
    line = line_of(tmp_path / "k.py", "def scale")
    assert text.startswith(f"{path}:{line}:1: error[E602]: none of the 2 autotune candidates of 'scale' compiled and fit "
                           f"(x:f32[4096] y:f32[4096] on ascend910b1, block_dim 4)\n")
    assert "    def scale(x: GM[f32], y: GM[f32], TILE: Const[int] = 64):\n    ^" in text
    notes = [line for line in text.splitlines() if line.startswith("note: ")]
    assert [n.split(":")[1].strip() for n in notes] == [f"TILE={BIG}", f"TILE={BIG * 2}"]
    body = line_of(tmp_path / "k.py", "y[t] = ")
    assert all(f"{path}:{body}:" in n and "error[E301]" in n for n in notes)  # each with its own location
    assert text.splitlines()[-1].startswith("hint: add smaller values to the search space")
    np.testing.assert_array_equal(y, 7.0)


def test_a_second_call_uses_the_cache_in_memory_then_on_disk(tmp_path: Path, profiles: list[dict]) -> None:
    k = tuned(tmp_path)
    x, y = data()
    first = k[4].best(x, y)
    assert len(profiles) == 4 and first.source == "tuned"
    k[4](x, y)
    assert k[4].best(x, y).source == "memory"
    again = dsl.autotune(TILE=[32, 64, 256, 1024])(k.base)  # a new process, as far as memory goes
    y2 = np.zeros_like(y)
    again[4](x, y2)
    assert len(profiles) == 4  # no profile
    np.testing.assert_array_equal(y2, x * 2)
    hit = again[4].best(x, y)
    assert hit.source == "disk" and hit.config == first.config and hit.cycles == first.cycles
    assert "from the disk cache" in str(hit) and "from the disk cache" in hit.table()


def test_the_cache_is_keyed_by_shape_class(tmp_path: Path, profiles: list[dict]) -> None:
    k = tuned(tmp_path)
    x, y = data(1000)
    k[4](x, y)
    assert len(profiles) == 4
    x2, y2 = data(1024)  # 1000 and 1024 round up to the same power of two
    k[4](x2, y2)
    assert len(profiles) == 4
    np.testing.assert_array_equal(y2, x2 * 2)
    x3, y3 = data(1025)
    k[4](x3, y3)
    assert len(profiles) == 8
    k[2](x3, y3)  # another block_dim
    assert len(profiles) == 12
    k[2](torch.from_numpy(x3), torch.from_numpy(y3))  # torch or numpy: the same class
    assert len(profiles) == 12
    files = list((Path(CONFIG.cache_dir) / "autotune").iterdir())
    assert len(files) == 1  # one file per kernel, one entry per class
    entries = [e.split(" | ") for e in json.loads(files[0].read_text())["entries"]]
    assert sorted((e[0], e[2]) for e in entries) == [("x:f32[1024] y:f32[1024]", "block_dim 4"),
                                                     ("x:f32[2048] y:f32[2048]", "block_dim 2"),
                                                     ("x:f32[2048] y:f32[2048]", "block_dim 4")]
    assert all(e[1].startswith("ascend910b1 ") for e in entries)  # the config's name and fingerprint


def test_a_corrupt_or_foreign_cache_file_means_a_new_tune(tmp_path: Path, profiles: list[dict]) -> None:
    k = tuned(tmp_path)
    x, y = data()
    k[4].best(x, y)
    file = next((Path(CONFIG.cache_dir) / "autotune").iterdir())
    good = file.read_text()
    for bad in ("{not json", '{"version": 1, "entries": []}', "[]", "",
                good.replace('"symbol": "vinci_', '"symbol": "stale_'),  # the compiler would build other code
                good.replace('"best": ', '"best": 99 + ')):
        file.write_text(bad)
        before = len(profiles)
        fresh = dsl.autotune(TILE=[32, 64, 256, 1024])(k.base)
        assert fresh[4].best(x, y).source == "tuned"
        assert len(profiles) == before + 4
        json.loads(file.read_text())  # written anew


def test_editing_the_kernel_or_the_space_retunes(tmp_path: Path, profiles: list[dict]) -> None:
    x, y = data()
    tuned(tmp_path)[4].best(x, y)
    assert len(profiles) == 4
    tuned(tmp_path)[4].best(x, y)  # reloaded, unchanged: from disk
    assert len(profiles) == 4
    tuned(tmp_path, src=SCALE.replace("* 2.0", "* 3.0"))[4].best(x, y)
    assert len(profiles) == 8
    tuned(tmp_path, "TILE=[64, 256]", src=SCALE.replace("* 2.0", "* 3.0"))[4].best(x, y)
    assert len(profiles) == 10


def test_vinci_autotune_0_ignores_saved_choices(tmp_path: Path, profiles: list[dict],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    k = tuned(tmp_path)
    x, y = data()
    k[4].best(x, y)
    monkeypatch.setattr(CONFIG, "autotune_cache", False)  # VINCI_AUTOTUNE=0
    fresh = dsl.autotune(TILE=[32, 64, 256, 1024])(k.base)
    assert fresh[4].best(x, y).source == "tuned" and len(profiles) == 8
    fresh[4](x, y)
    assert len(profiles) == 8  # tuned once per process


def test_tuning_leaves_the_callers_tensors_alone(tmp_path: Path) -> None:
    k = tuned(tmp_path)
    x, y = data()
    x0 = x.copy()
    k[4].best(x, y)
    np.testing.assert_array_equal(y, 7.0)
    np.testing.assert_array_equal(x, x0)
    k[4](x, y)
    np.testing.assert_array_equal(y, x * 2)
    # a kernel that updates its input in place runs once for real, whatever the number of candidates
    inc = load(tmp_path / "inc.py", """
        @dsl.autotune(TILE=[32, 64, 128])
        @dsl.kernel
        def inc(x: GM[f32], TILE: Const[int] = 64):
            for t in dsl.tiles(x.shape[0], TILE):
                x[t] = x[t] + 1.0
        """).inc
    t = torch.zeros(1000)
    inc[4](t)
    assert torch.equal(t, torch.ones(1000))
    assert inc.written == {"x"}


def test_written_params_reads_the_kernel() -> None:
    from dsl.parser import parse_function

    fdef = parse_function(textwrap.dedent("""
        def k(a: GM, b: GM, c: GM, d: GM, e: GM, f: GM, g: GM, BM: Const[int] = 16):
            buf = dsl.alloc(dsl.UB, (BM,), f32)
            n = a.shape[0] + b.shape[0]
            for t in dsl.tiles(n, BM):
                dsl.copy(buf, a[t])
                acc = a.T[t, t] @ b[t, t]
                dsl.copy(c[t], buf)
                d[t] += buf
                dsl.copy(dst=e[t], src=buf)
                alias = f
                buf2 = g[t] * 2
        """), "<k>")
    assert written_params(fdef, {"a", "b", "c", "d", "e", "f", "g"}) == {"c", "d", "e", "f"}


def test_profile_and_repr_show_which_config_ran(tmp_path: Path) -> None:
    k = tuned(tmp_path)
    x, y = data()
    run = k[4].profile(x, y)
    assert isinstance(run, TunedRun)
    best = k[4].best(x, y)
    assert run.tuned == best.config and run.cycles == best.cycles
    assert f"autotuned: TILE={best.config['TILE']} (best of 4 candidates)" in run.report()
    assert f"autotuned TILE={best.config['TILE']}" in repr(run)
    np.testing.assert_array_equal(y, x * 2)
    assert "over 4 configs of TILE" in repr(k)


def test_a_tuned_value_given_by_the_caller_is_used_as_given(tmp_path: Path, profiles: list[dict]) -> None:
    k = tuned(tmp_path)
    x, y = data()
    run = k[4].profile(x, y, TILE=32)
    assert run.tuned == {"TILE": 32} and run.tuning is None and "given by the caller" in run.report()
    k(x, y, 64)
    assert profiles == []  # nothing tuned


def test_configs_and_a_key_function(tmp_path: Path, profiles: list[dict]) -> None:
    k = tuned(tmp_path, 'configs=[{"TILE": 64}, {"TILE": 512}], key=lambda x, y: x.shape[0] > 2048')
    x, y = data(3000)
    best = k[4].best(x, y)
    assert best.shape_class == "key=True" and [t.config for t in best.trials] == [{"TILE": 64}, {"TILE": 512}]
    k[4](*data(5000))  # the same class by the key
    assert len(profiles) == 2


@pytest.mark.parametrize("space,message", [
    ("NOPE=[1, 2]", "autotune names 'NOPE', which is not a Const parameter of scale"),
    ("x=[1, 2]", "autotune names 'x', which is not a Const parameter of scale"),
    ("TILE=64", "autotune TILE=... must be a non-empty list of values, got 64"),
    ("TILE=[]", "autotune TILE=... must be a non-empty list of values, got []"),
    ("", "autotune of 'scale' has nothing to try"),
    ('configs=[{"TILE": 64}], TILE=[1]', "autotune takes configs=[...] or one list per parameter, not both"),
])
def test_a_bad_search_space_says_what_is_wrong(tmp_path: Path, space: str, message: str) -> None:
    with pytest.raises(KernelError) as ei:
        tuned(tmp_path, space)
    assert ei.value.code == "E601" and ei.value.message == message
    line = line_of(tmp_path / "k.py", "def scale")
    assert ei.value.render().startswith(f"{tmp_path / 'k.py'}:{line}:1: error[E601]: ")


def test_autotune_goes_above_kernel() -> None:
    with pytest.raises(TypeError, match="directly above @dsl.kernel"):
        dsl.autotune(TILE=[1])(lambda x: x)  # type: ignore[arg-type]


def test_matmul_on_the_cube(tmp_path: Path) -> None:
    mm = load(tmp_path / "mm.py", """
        @dsl.autotune(BM=[32, 64], BK=[16, 64, 4096])
        @dsl.kernel
        def matmul(a: GM, b: GM, c: GM, BM: Const[int] = 64, BN: Const[int] = 64, BK: Const[int] = 32):
            for m, n in dsl.tiles2d((a.shape[0], b.shape[1]), (BM, BN)):
                acc = dsl.zeros((BM, BN), f32)
                for k in dsl.range(0, a.shape[1], BK):
                    acc += a[m, k] @ b[k, n]
                c[m, n] = dsl.cast(acc, c.dtype)
        """).matmul
    rng = np.random.default_rng(1)
    a = rng.standard_normal((96, 80)).astype(np.float16)
    b = rng.standard_normal((80, 112)).astype(np.float16)
    c = np.zeros((96, 112), np.float32)
    best = mm[4].best(a, b, c)
    assert [t.config["BK"] for t in best.failed] == [4096, 4096]  # 64 x 4096 f16 does not fit L0A
    assert best.config["BK"] in (16, 64)
    mm[4](a, b, c)
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-3, atol=1e-3)


def test_vinci_tune_prints_the_ranked_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.py"
    load(path, SCALE)
    argv = ["tune", f"{path}::scale", "--shape", "x=4096", "--shape", "y=4096", "--cores", "4"]
    with pytest.raises(SystemExit, match="scale is not autotuned: give a search space"):
        main(argv)
    assert main(argv + ["--space", f"TILE=64,256,{BIG}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("scale[4] on ascend910b1 for x:f32[4096] y:f32[4096]: 3 candidates, 1 failed, tuned in")
    assert out[1].split() == ["rank", "cycles", "us", "M", "busy", "effic.", "bound", "config"]
    assert [line.split()[0] for line in out[2:]] == ["1", "2", "-"]
    assert main(argv + ["--space", f"TILE=64,256,{BIG}", "--top", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "from the disk cache" in out[0] and out[3].strip() == "... 1 more"
    # a decorated kernel brings its own space; --const pins a value
    load(path, "\n@dsl.autotune(TILE=[32, 64])" + SCALE)
    assert main(argv + ["--const", "TILE=32"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "1 candidates" in out[0] and out[2].endswith("TILE=32")
    # vinci profile runs the choice (or the value given)
    profile = ["profile", *argv[1:]]
    assert main(profile) == 0
    out = capsys.readouterr().out
    assert "autotuned: TILE=" in out and "(best of 2 candidates)" in out
    assert main(profile + ["--const", "TILE=64"]) == 0
    assert "autotuned: TILE=64 (given by the caller)" in capsys.readouterr().out


def test_trial_json_round_trip() -> None:
    t = Trial({"TILE": 64, "DT": dsl.f16, "MODE": "x"}, 10, 1e-6, {"M": 0.5}, 0.9, "MTE2")
    tu = Tuning("k", "x:f32[8]", "ascend910b1", 4, [t, Trial({"TILE": 1}, error="error[E301]: no")], 0, 1.5, "sym")
    back = Tuning.from_json(json.loads(json.dumps(tu.to_json())), "disk")
    assert back.trials == tu.trials and back.config["DT"] is dsl.f16 and back.source == "disk"

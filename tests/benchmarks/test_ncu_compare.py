"""bench/ncu_compare.py's reading of ncu's CSV (the GPU part runs on the device): per-launch
durations and clocks in whatever unit ncu prints them, the cache control passed through, and a
failed profile reported with ncu's own words."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from tests.support.bench_scripts import bench_script

ncu_compare = bench_script("ncu_compare")

pytestmark = pytest.mark.skipif(os.name == "nt", reason="the stand-in ncu is a POSIX script")


def stand_in_ncu(tmp_path: Path, csv_lines: list[str]) -> str:
    """An executable that records its arguments and prints ``csv_lines`` after some chatter, as ncu does."""
    script = tmp_path / "ncu"
    out = "\n".join(["==PROF== Connected to process 1", *csv_lines])
    script.write_text(f"#!{sys.executable}\nimport sys\n"
                      f"open({str(tmp_path / 'argv')!r}, 'w').write('\\n'.join(sys.argv[1:]))\n"
                      f"print({out!r})\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_durations_are_read_in_any_unit_and_the_median_taken(tmp_path):
    ncu = stand_in_ncu(tmp_path, ['"ID","Kernel Name","gpu__time_duration.sum"', '"","","usecond"',
                                  '"0","k","1,500.5"', '"1","k","400.0"', '"2","k","420.0"'])
    found, launches, err = ncu_compare.ncu_median(ncu, "m.json", "case", "k", None)
    assert found == {"ncu_us": pytest.approx(420.0)} and launches == 3 and err == ""
    ncu = stand_in_ncu(tmp_path, ['"ID","gpu__time_duration.sum"', '"","msecond"', '"0","25.5"'])
    assert ncu_compare.ncu_median(ncu, "m.json", "case", "k", None)[0]["ncu_us"] == pytest.approx(25500.0)


def test_clocks_are_asked_for_and_read_in_ghz_and_the_cache_control_passed_on(tmp_path):
    ncu = stand_in_ncu(tmp_path, [
        '"ID","gpu__time_duration.sum","sm__cycles_elapsed.avg.per_second","dram__cycles_elapsed.avg.per_second"',
        '"","nsecond","cycle/usecond","Ghz"',
        '"0","420000","1,755.2","3.19"', '"1","404000","1,980.0","3.20"', '"2","410000","1,900.0","3.21"'])
    found, launches, _ = ncu_compare.ncu_median(ncu, "m.json", "case", "k", None, cache_control="none", clock=True)
    assert found["ncu_us"] == pytest.approx(410.0)
    assert found["ncu_sm_ghz"] == pytest.approx(1.9) and found["ncu_dram_ghz"] == pytest.approx(3.2)
    argv = (tmp_path / "argv").read_text().split("\n")
    assert argv[argv.index("--cache-control") + 1] == "none"
    assert argv[argv.index("--metrics") + 1].split(",") == [ncu_compare.TIME, *ncu_compare.CLOCKS.values()]


def test_an_unknown_unit_gives_no_figure_rather_than_a_wrong_one(tmp_path):
    ncu = stand_in_ncu(tmp_path, ['"ID","gpu__time_duration.sum"', '"","fortnight"', '"0","3"'])
    assert ncu_compare.ncu_median(ncu, "m.json", "case", "k", None)[0] == {"ncu_us": None}


def test_a_profile_without_rows_returns_ncus_message(tmp_path):
    ncu = stand_in_ncu(tmp_path, ['==ERROR== ERR_NVGPUCTRPERM - no permission to access counters'])
    found, launches, err = ncu_compare.ncu_median(ncu, "m.json", "case", "k", None)
    assert found == {} and launches == 0 and "ERR_NVGPUCTRPERM" in err

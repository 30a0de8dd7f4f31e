# PYTHON_ARGCOMPLETE_OK  (argcomplete: `python -m harness` completes as katra3d does)
"""``python -m harness``: the katra3d command line, or, with ``$KATRA3D_MEASURE_CHILD`` set, the counted
child of ``--measure instructions|cycles`` (it takes no arguments: its plan is in the dump directory)."""

import sys

from harness.cli import main
from harness.run import measure

if measure.in_child():
    from harness.run import runner  # deferred: only the counted child runs the engine straight away

    sys.exit(runner.run_child())
sys.exit(main())

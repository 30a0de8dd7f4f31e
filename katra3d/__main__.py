# PYTHON_ARGCOMPLETE_OK  (argcomplete: `python -m katra3d` completes as katra3d does)
"""``python -m katra3d``: the command line, or with ``$KATRA3D_MEASURE_CHILD`` set the counted child
of ``--measure`` (its plan is in the dump directory)."""

import sys

from katra3d.harness.cli import main
from katra3d.harness.run import measure

if measure.in_child():
    # deferred: only the counted child runs the engine straight away
    from katra3d.harness.run import runner

    sys.exit(runner.run_child())
sys.exit(main())

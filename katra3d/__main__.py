# PYTHON_ARGCOMPLETE_OK
"""``python -m katra3d``: the command line, or the counted child of ``--measure``."""

import sys

from katra3d.harness.cli import main
from katra3d.harness.run import measure

if measure.in_child():
    # deferred: only the counted child needs the runner
    from katra3d.harness.run import runner

    sys.exit(runner.run_child())
sys.exit(main())

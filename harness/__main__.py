"""``python -m harness``: the katra3d command line (and the counted child of ``--measure instructions``)."""

import sys

from harness.cli import main
from harness.run.measure import child_argv

sys.exit(main(child_argv()))

"""`python -m orchestrator.cli` is the `trialbox` command."""

import sys

from orchestrator.cli import main

sys.exit(main())

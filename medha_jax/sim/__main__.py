"""Entry point: `python -m medha_jax.sim --help`."""

import sys

from medha_jax.sim.cli import main

sys.exit(main())

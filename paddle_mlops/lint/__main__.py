"""`python -m paddle_mlops.lint`: the same command as `paddle-mlops lint`."""

import sys

from paddle_mlops.lint.command import main

sys.exit(main())

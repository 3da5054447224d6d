"""``python -m conformance``: the ``dra-conformance`` command line."""

import sys

from conformance import warm

if sys.argv[1:2] == ["run"]:
    warm.prestart()  # before the command line's own imports: see conformance.cli.main

from conformance.cli import main

raise SystemExit(main())

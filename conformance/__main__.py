"""``python -m conformance``: the ``dra-conformance`` command line."""

from conformance.cli import main

raise SystemExit(main())

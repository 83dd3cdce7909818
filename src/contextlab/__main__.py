"""``python -m contextlab`` runs the command line (torchrun uses this form)."""

from contextlab.cli import main

raise SystemExit(main())

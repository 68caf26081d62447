"""``python -m trizre.audit TRACE_DIR [--master URL] [--out REPORT_DIR]``."""

from .cli import main

raise SystemExit(main(prog="python -m trizre.audit"))

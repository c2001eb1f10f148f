"""`python -m refund_desk` is the `refund-desk` command."""

from refund_desk.cli.main import main

main()

"""`python -m refund_desk` is the `refund-desk` command."""

from refund_desk.bot.cli import main

main()

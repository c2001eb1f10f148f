"""The Slack surface: Bolt listeners per surface, Block Kit cards, and the outbox."""

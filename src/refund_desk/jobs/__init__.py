"""Durable work: the jobs table (`queue`) and the leases held across a processor call."""

"""Nylas: its messages, the channel, the sender (the SDK seam), its error mapping, and the
listing catch-up reads."""

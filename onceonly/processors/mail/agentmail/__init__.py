"""AgentMail: its messages, the channel, the sender (the SDK seam), the transport under the
SDK, and the listing catch-up reads."""

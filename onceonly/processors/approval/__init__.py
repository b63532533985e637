"""Approval: drafts a person approves before the customer reads them: the pure decisions,
and how the partition's owner applies them."""

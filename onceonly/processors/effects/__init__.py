"""Effects: an irreversible step performed once per key, recorded before it runs; and
the event handler that performs them for non-mail events."""

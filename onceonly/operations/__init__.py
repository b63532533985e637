"""Operations on a running system: replay, catch-up, dead letters, lag."""

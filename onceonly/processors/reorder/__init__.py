"""Reorder: each thread's deliveries held in a buffer and released in payload order once
its window has passed."""

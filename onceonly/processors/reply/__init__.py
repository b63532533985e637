"""Reply once: the decisions over a burst and its ledger records (``bursts``), the reply
step (``once``), what one reply reaches of the worker (``parts``), the send of a recorded
reply (``sending``) and the ledger over the worker's table (``ledger``)."""

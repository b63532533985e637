"""The local development stack: an embedded Kafka broker and `python -m devstack up`. Not product
code."""

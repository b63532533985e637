"""The local development stack: an embedded Kafka broker and `onceonly up`. Not product code."""

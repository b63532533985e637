"""The foundation: errors, settings, logging and the Kafka seam. Imports only schemas."""

"""Test support that tests, chaos and bench share, as structlog ships structlog.testing:
local servers that speak the providers' APIs (fakes/), signing with the providers' own
code (signing), sample payloads (payloads), and a supervised process (processes).
"""

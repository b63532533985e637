"""The reply writer: its contract (``contract``: the messages it is given, what it may
return), how the worker runs it (``runner``: bounded, timed out, retried, admitted), how
``ONCEONLY_REPLY_WRITER`` is loaded (``loading``), and a worked example on the openai SDK
(``openai``). ``onceonly.processors.writer:acknowledge`` is the default writer."""

from onceonly.processors.writer.loading import acknowledge

__all__ = ["acknowledge"]

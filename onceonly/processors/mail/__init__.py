"""Mail providers: the protocol each provider package implements whole
(:mod:`~onceonly.processors.mail.protocol`) and the registry that holds them by the names of
:mod:`onceonly.foundation.providers` (:mod:`~onceonly.processors.mail.registry`)."""

"""The stream runtime: faust and aiokafka behind one seam.

The only package of onceonly that imports faust, mode or aiokafka (the layer test holds
it to that). It builds the faust App and its tables and topics, runs the agent loop that
hands each record (a :class:`~onceonly.processors.records.Record`) to the pipeline,
tracks offsets and ownership in its consumer, recovers tables in bulk, and wires the
timers and the web page. Everything it hands the rest of the worker is typed in
:mod:`onceonly.processors.records`; upgrading faust-streaming means auditing this package.
"""

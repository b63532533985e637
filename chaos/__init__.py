"""The chaos suite: ``make chaos`` (full size) and ``make chaos-ci`` (the CI size).

Everything is in :mod:`chaos.run`; its docstring says what runs, what fails and how to
read the result.
"""

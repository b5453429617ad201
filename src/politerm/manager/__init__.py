"""Manager mode: an LLM "dev manager" that drives a dev agent toward a goal.

The engine (:mod:`politerm.manager.engine`) moves each project through the state machine of
:mod:`politerm.manager.states`, asks the brain (:mod:`politerm.manager.brain`) for the next
instruction, hands it to the dev agent over a channel (:mod:`politerm.manager.channels`), and
reads the report back. The REPL (``poli manager``) is :mod:`politerm.manager.repl`; its
tables in the run store are :mod:`politerm.manager.store`, its settings (``[manager]``)
:mod:`politerm.config.manager`. Nothing is imported here: importing one part stays cheap.
"""

"""Agents talk to each other: pane-to-pane requests and responses, an inbox, an MCP server.

The protocol text (:mod:`~politerm.messaging.protocol`), the private message directory
(:mod:`~politerm.messaging.files`), sending and answering (:mod:`~politerm.messaging.service`),
the postman that delivers on the agent driver (:mod:`~politerm.messaging.postman`) and
``poli mcp`` (:mod:`~politerm.messaging.mcp_server`); what an agent's process sees is the
start path's (:func:`~politerm.driver.launch.prepare_launch`), panes by program are the
driver's (:mod:`~politerm.driver.processes`).
See docs/messaging.md.
"""

from __future__ import annotations

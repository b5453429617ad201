"""Engine: delivery with confirmation, routing, timeouts."""

from __future__ import annotations

from politerm.engine.delivery import DeliveryResult, Outcome, deliver

__all__ = ["DeliveryResult", "Outcome", "deliver"]

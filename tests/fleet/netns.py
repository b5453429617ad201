"""Fleet machines in network namespaces of their own, reaching Redis over a veth pair.

Each simulated machine gets a namespace (``ip netns add``) and a veth pair: one end in the
namespace, the other on the host, a /30 of its own between them. Redis listens on the
host ends too, so a node in its namespace reaches it the way a machine reaches a server:
through a link that a test can take down (``ip link set … down``) — a real partition, where
packets are lost and nothing tells either side, rather than a paused process.

Making namespaces needs root (CI runs as root). Where they cannot be made, :func:`make_net`
returns a :class:`FleetNet` on loopback that says so in :attr:`FleetNet.how`: the caller
then cuts a machine off by pausing its processes (SIGSTOP) instead.

Names are unique per test (a random tag, and the pytest process's pid so that a later run
removes what a killed one left behind); :meth:`FleetNet.close` deletes every namespace and
link it made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import random
import re
import shutil
import subprocess
import typing as t

if t.TYPE_CHECKING:
    from collections.abc import Sequence

LOOPBACK = "127.0.0.1"
PREFIX = "polins"
_STALE = re.compile(rf"^{PREFIX}(\d+)x")


class NetError(Exception):
    """An ``ip`` command failed (its words attached)."""


def _ip(*args: str) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if done.returncode != 0:
        msg = f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}"
        raise NetError(msg)
    return done.stdout


@dataclasses.dataclass
class Link:
    """One machine's namespace and veth pair."""

    netns: str
    host_if: str
    host_ip: str
    ns_ip: str


@dataclasses.dataclass
class FleetNet:
    """The machines' network: namespaces and veths, or loopback (``links`` empty)."""

    how: str
    links: dict[str, Link] = dataclasses.field(default_factory=dict)

    @property
    def namespaced(self) -> bool:
        """Each machine is in a namespace of its own (partitions are links down)."""
        return bool(self.links)

    def netns(self, machine: str) -> str | None:
        """The machine's namespace (None on loopback)."""
        link = self.links.get(machine)
        return link.netns if link else None

    def redis_host(self, machine: str) -> str:
        """The address the machine reaches Redis at."""
        link = self.links.get(machine)
        return link.host_ip if link else LOOPBACK

    def binds(self) -> list[str]:
        """Every address Redis must listen on for all the machines."""
        return [LOOPBACK, *(link.host_ip for link in self.links.values())]

    def cut(self, machine: str) -> None:
        """Take the machine's link down: nothing gets through, nothing is refused."""
        _ip("link", "set", self.links[machine].host_if, "down")

    def heal(self, machine: str) -> None:
        """Bring the machine's link up again."""
        _ip("link", "set", self.links[machine].host_if, "up")

    def close(self) -> None:
        """Delete every namespace and host link made (each one tried, errors ignored)."""
        for link in self.links.values():
            with contextlib.suppress(NetError):
                _ip("netns", "del", link.netns)
            with contextlib.suppress(NetError):
                _ip("link", "del", link.host_if)  # gone with its peer, unless a process held it
        self.links.clear()


def _remove_stale() -> None:
    """Namespaces a killed pytest process left (its pid in the name, no longer running)."""
    with contextlib.suppress(NetError):
        for line in _ip("netns", "list").splitlines():
            name = line.split()[0] if line.split() else ""
            found = _STALE.match(name)
            if found and not pathlib.Path(f"/proc/{found.group(1)}").exists():
                with contextlib.suppress(NetError):
                    _ip("netns", "del", name)


def _free_subnet(rng: random.Random) -> tuple[int, int]:
    """A 10.X.Y.0/24 no interface of the host uses (each machine takes a /30 of it)."""
    used = _ip("-4", "-o", "addr", "show")
    for _ in range(100):
        x, y = rng.randint(64, 254), rng.randint(0, 255)
        if f" 10.{x}.{y}." not in used:
            return x, y
    msg = "no free 10.X.Y.0/24 for the test's links"
    raise NetError(msg)


def make_net(machines: Sequence[str]) -> FleetNet:
    """One namespace and veth pair per machine, or loopback where they cannot be made."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        why = "not root" if os.geteuid() != 0 else "no ip command (iproute2)"
        return FleetNet(f"loopback ({why}: no network namespaces; a partition is SIGSTOP)")
    _remove_stale()
    rng = random.Random()
    tag = f"{os.getpid()}x{rng.randrange(16**4):04x}"
    net = FleetNet("")
    try:
        x, y = _free_subnet(rng)
        for i, machine in enumerate(machines):
            ns = f"{PREFIX}{tag}{machine}"
            host_if, ns_if = f"pv{tag[-4:]}{machine}h"[:15], f"pv{tag[-4:]}{machine}n"[:15]
            link = Link(ns, host_if, f"10.{x}.{y}.{4 * i + 1}", f"10.{x}.{y}.{4 * i + 2}")
            _ip("netns", "add", ns)
            net.links[machine] = link
            _ip("link", "add", host_if, "type", "veth", "peer", "name", ns_if)
            _ip("link", "set", ns_if, "netns", ns)
            _ip("addr", "add", f"{link.host_ip}/30", "dev", host_if)
            _ip("link", "set", host_if, "up")
            for args in (
                ("addr", "add", f"{link.ns_ip}/30", "dev", ns_if),
                ("link", "set", ns_if, "up"),
                ("link", "set", "lo", "up"),
            ):
                _ip("-n", ns, *args)
            # A container may let namespaces be made but not entered (sysfs mount refused).
            _ip("netns", "exec", ns, "true")
    except NetError as exc:
        net.close()
        return FleetNet(f"loopback (network namespaces could not be made: {exc})")
    names = ", ".join(f"{m} {link.netns} {link.ns_ip}" for m, link in net.links.items())
    net.how = f"network namespaces ({names}; Redis on the host ends; a partition is link down)"
    return net

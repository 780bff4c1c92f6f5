"""Hosts: the machines Ember reaches over SSH (see page.py)."""

from app.pages.hosts.page import HostsPage

__all__ = ["HostsPage"]

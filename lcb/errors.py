"""Errors a user can act on. Every CLI prints them as one line and exits non-zero."""

from __future__ import annotations


class LcbError(Exception):
    """Bad input or an unusable environment, phrased for the person running the command."""


class DataError(LcbError):
    """The data set (file, hub, row or test blob) cannot be used."""

"""A tiny calculator with a bug for the demo's coder to find."""


def add(a: float, b: float) -> float:
    return a - b


def mul(a: float, b: float) -> float:
    return a * b

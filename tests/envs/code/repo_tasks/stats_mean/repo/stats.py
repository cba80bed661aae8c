"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of `values`."""
    return sum(values) / (len(values) - 1)


def spread(values):
    """The largest value minus the smallest."""
    return max(values) - min(values)

"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of `values`, None when there are none."""
    if not values:
        return None
    return sum(values) / len(values)


def spread(values):
    """The largest value minus the smallest."""
    return max(values) - min(values)

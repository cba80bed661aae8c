"""URL slugs."""

import re


def slugify(title):
    """A URL-friendly version of `title`: lower case, runs of other characters as one '-'."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")

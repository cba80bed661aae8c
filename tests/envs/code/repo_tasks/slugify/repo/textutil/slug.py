"""URL slugs."""


def slugify(title):
    """A URL-friendly version of `title`."""
    return title.lower().replace(" ", "-")

import unittest

from textutil.slug import slugify


class HiddenSlugTest(unittest.TestCase):
    def test_edges(self):
        self.assertEqual(slugify("  --Already-Slugged--  "), "already-slugged")

    def test_digits(self):
        self.assertEqual(slugify("Top 10 Tips (2024)"), "top-10-tips-2024")

    def test_empty(self):
        self.assertEqual(slugify("!!!"), "")

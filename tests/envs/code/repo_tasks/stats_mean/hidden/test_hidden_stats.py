import unittest

from stats import mean


class HiddenStatsTest(unittest.TestCase):
    def test_empty(self):
        self.assertIsNone(mean([]))

    def test_single(self):
        self.assertEqual(mean([5]), 5)

    def test_floats(self):
        self.assertAlmostEqual(mean([0.5, 1.5, 2.5, 3.5]), 2.0)

"""compare.py's parsers against tables captured from real runs (bench/testdata): python3 -m unittest discover bench"""
import os
import unittest

import compare

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")


def read(name):
    with open(os.path.join(HERE, name)) as fh:
        return fh.read()


class Parsers(unittest.TestCase):
    def test_collscope_table_and_facts(self):
        rows, facts = compare.parse_collscope(read("collscope-perf.txt"))
        self.assertEqual(sorted(rows)[0], 8)
        self.assertEqual(sorted(rows)[-1], 524288)
        self.assertEqual(len(rows), 5)
        big = rows[524288]
        self.assertGreater(big["ip_busbw"], 0.0)
        self.assertGreater(big["oop_us"], rows[8]["oop_us"])
        self.assertGreater(facts["init_ms"], 0.0)
        self.assertEqual(len(facts["rss_mib"]), 4)
        self.assertEqual(len(facts["peak_rss_mib"]), 4)

    def test_anchor_tables(self):
        mpi = compare.parse_anchor(read("mpi.txt"))
        self.assertEqual(sorted(mpi), [8 << i for i in range(10)])
        self.assertGreater(mpi[4096]["ip_us"], 0.0)
        gloo = compare.parse_anchor(read("gloo.txt"))
        self.assertEqual(sorted(gloo), [1 << 20, 2 << 20])
        self.assertGreater(gloo[2 << 20]["ip_busbw"], 0.0)
        tcp = compare.parse_anchor(read("tcp-bound.txt"))
        self.assertEqual(sorted(tcp), [1 << 20, 2 << 20])
        self.assertGreater(tcp[1 << 20]["ip_busbw"], 0.0)
        # The other tool's table is not mistaken for one's own.
        self.assertEqual(compare.parse_anchor(read("collscope-perf.txt")), {})
        self.assertEqual(compare.parse_collscope(read("mpi.txt"))[0], {})


if __name__ == "__main__":
    unittest.main()

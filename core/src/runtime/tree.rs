//! The double binary tree the runtime's Tree algorithm runs on (NCCL 2.28.9 `src/graph/trees.cc`,
//! `ncclGetBtree`/`ncclGetDtree`), over rank indices.

/// A rank's place in one tree: parent and up to two children (-1 for none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeNode {
    pub up: i32,
    pub down: [i32; 2],
}

impl TreeNode {
    pub fn children(&self) -> impl Iterator<Item = u32> + '_ {
        self.down.iter().filter(|&&d| d >= 0).map(|&d| d as u32)
    }
}

/// The binary tree rooted at 0 that alternates leaves and nodes.
pub fn btree(nranks: i32, rank: i32) -> TreeNode {
    let mut bit = 1;
    while bit < nranks && bit & rank == 0 {
        bit <<= 1;
    }
    if rank == 0 {
        return TreeNode { up: -1, down: [-1, if nranks > 1 { bit >> 1 } else { -1 }] };
    }
    let mut up = (rank ^ bit) | (bit << 1);
    if up >= nranks {
        up = rank ^ bit;
    }
    let mut lowbit = bit >> 1;
    let down0 = if lowbit == 0 { -1 } else { rank - lowbit };
    let mut down1 = if lowbit == 0 { -1 } else { rank + lowbit };
    while down1 >= nranks {
        down1 = if lowbit == 0 { -1 } else { rank + lowbit };
        lowbit >>= 1;
    }
    TreeNode { up, down: [down0, down1] }
}

/// Both trees of the double binary tree: the second mirrors the first for even counts, shifts it by one
/// rank for odd counts.
pub fn dtree(nranks: i32, rank: i32) -> [TreeNode; 2] {
    let t0 = btree(nranks, rank);
    let map = |v: i32, f: &dyn Fn(i32) -> i32| if v == -1 { -1 } else { f(v) };
    let t1 = if nranks % 2 == 1 {
        let t = btree(nranks, (rank - 1 + nranks) % nranks);
        let f = |v: i32| (v + 1) % nranks;
        TreeNode { up: map(t.up, &f), down: [map(t.down[0], &f), map(t.down[1], &f)] }
    } else {
        let t = btree(nranks, nranks - 1 - rank);
        let f = |v: i32| nranks - 1 - v;
        TreeNode { up: map(t.up, &f), down: [map(t.down[0], &f), map(t.down[1], &f)] }
    };
    [t0, t1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_nccls_pictures_and_is_consistent() {
        // trees.cc's 14-rank picture: 8's children are 4 and 12, 13's parent is 12.
        assert_eq!(btree(14, 8), TreeNode { up: 0, down: [4, 12] });
        assert_eq!(btree(14, 13).up, 12);
        assert_eq!(btree(14, 0), TreeNode { up: -1, down: [-1, 8] });
        // Mirror for 12 ranks: rank 11 (the mirror of 0) roots the second tree, with 3 as its child.
        assert_eq!(dtree(12, 11)[1], TreeNode { up: -1, down: [-1, 3] });
        for n in 1..=17 {
            for t in 0..2 {
                let mut roots = 0;
                for r in 0..n {
                    let node = dtree(n, r)[t];
                    if node.up == -1 {
                        roots += 1;
                    } else {
                        assert!(dtree(n, node.up)[t].down.contains(&r), "n {n} tree {t} rank {r}");
                    }
                    for c in node.children() {
                        assert_eq!(dtree(n, c as i32)[t].up, r);
                    }
                }
                assert_eq!(roots, 1, "n {n} tree {t}");
            }
        }
    }
}
